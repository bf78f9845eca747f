"""§8 rules 2-4 on the receiving side (mpcp.datagram.EpochReceiver), without
sockets: later epochs that open become current (also past lost epochs), the
previous epoch keeps its window or gets an empty one, one later key at a time,
failures under later epochs counted together."""
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mpcp import datagram as D                                # noqa: E402

SECRET = os.urandom(32)
RID = 7


def key(epoch):
    return bytes((b + epoch) % 256 for b in SECRET)


def sealed(epoch, counter, msg=b"m", k=None):
    return D.seal(k or key(epoch), RID, epoch, counter, msg)


def rx(**kw):
    derived = []

    def derive(e):
        derived.append(e)
        return key(e)
    r = D.EpochReceiver(derive, **kw)
    r.log = derived
    return r


def recv(r, data):
    return r.receive(D.DatagramHeader.decode(data), data)[0]


def test_next_epoch_keeps_window_of_previous():
    r = rx()
    assert recv(r, sealed(0, 0)) == "ok"
    assert recv(r, sealed(1, 0)) == "ok"
    assert r.epoch == 1 and r.held_epochs() == {0, 1}
    assert recv(r, sealed(0, 0)) == "replay"       # E-1 kept its window
    assert recv(r, sealed(0, 1)) == "ok"


def test_jump_over_lost_epochs():
    r = rx()
    assert recv(r, sealed(0, 0)) == "ok"
    assert recv(r, sealed(3, 0)) == "ok"           # epochs 1 and 2 all lost
    assert r.epoch == 3 and r.held_epochs() == {2, 3}
    assert recv(r, sealed(2, 0)) == "ok"           # E'-1, empty window
    assert recv(r, sealed(2, 0)) == "replay"
    assert recv(r, sealed(1, 0)) == "epoch"        # before E-1
    assert recv(r, sealed(0, 1)) == "epoch"
    assert recv(r, sealed(3, 0)) == "replay"
    assert recv(r, sealed(3, 1)) == "ok"


def test_jump_from_start_derives_only_what_is_used():
    r = rx()
    assert recv(r, sealed(5, 9)) == "ok"           # no datagram of epoch 0 ever
    assert r.epoch == 5 and r.log == [5]           # one derivation for this datagram
    assert recv(r, sealed(4, 0)) == "ok"
    assert r.log == [5, 4]


def test_failed_later_epoch_changes_nothing():
    r = rx()
    assert recv(r, sealed(0, 0)) == "ok"
    assert recv(r, sealed(2, 0, k=bytes(32))) == "tag"
    assert r.epoch == 0 and r.later_failures == 1
    assert recv(r, sealed(0, 1)) == "ok"
    assert recv(r, sealed(1, 0)) == "ok"


def test_one_later_key_at_a_time():
    r = rx()
    assert recv(r, sealed(0, 0)) == "ok"
    r.log.clear()
    for e in (4, 4, 6, 4):                          # forged: each fails
        assert recv(r, sealed(e, 0, k=bytes(32))) == "tag"
    assert r.log == [4, 6, 4]                       # 4 kept for the second, replaced by 6, then 4 again
    assert r.later is not None and r.later[0] == 4
    assert r.later_failures == 4                    # counted together


def test_later_failures_counted_together_reach_limit():
    r = rx(failure_limit=5)
    assert recv(r, sealed(0, 0)) == "ok"
    out = [recv(r, sealed(e, 0, k=bytes(32))) for e in (1, 2, 3, 4, 5)]
    assert out == ["tag"] * 4 + ["limit"]


def test_success_resets_later_failures_and_per_epoch_failures():
    r = rx(failure_limit=3)
    assert recv(r, sealed(0, 0, k=bytes(32))) == "tag"
    assert recv(r, sealed(0, 1, k=bytes(32))) == "tag"
    assert recv(r, sealed(2, 0, k=bytes(32))) == "tag"
    assert recv(r, sealed(2, 1)) == "ok"            # now E=2, later failures reset
    assert r.later_failures == 0
    assert recv(r, sealed(2, 2, k=bytes(32))) == "tag"
    assert recv(r, sealed(2, 3, k=bytes(32))) == "tag"
    assert recv(r, sealed(2, 4, k=bytes(32))) == "limit"


def test_window_moves_only_after_opening():
    r = rx()
    assert recv(r, sealed(0, 100, k=bytes(32))) == "tag"
    assert recv(r, sealed(0, 5)) == "ok"
    assert recv(r, sealed(0, 100)) == "ok"


def test_plain_connection_follows_the_same_epochs():
    r = D.EpochReceiver(None)
    def p(e, c):
        data = D.plain(RID, e, c, b"x")
        return r.receive(D.DatagramHeader.decode(data), data)
    assert p(0, 0) == ("ok", b"x")
    assert p(3, 0) == ("ok", b"x")
    assert p(2, 0)[0] == "ok"
    assert p(2, 0)[0] == "replay"
    assert p(1, 0)[0] == "epoch"
