"""§7.2 invitations Python to Python on 127.0.0.1 (no discovery), and the
§12.2 TXT rules. Nothing here sends multicast."""
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mpcp import discovery as D                               # noqa: E402
from mpcp import frames as F                                  # noqa: E402
from mpcp.encodings import PeerID                             # noqa: E402
from mpcp.invitation import InvitationListener, invite, invite_and_connect  # noqa: E402
from mpcp.session import Session                              # noqa: E402
from mpcp.preamble import PREFERENCE_NAMES                    # noqa: E402


@pytest.fixture
def pair():
    inviter, chosen = Session("inviter", "required"), Session("advertiser", "required")
    made = []

    def make(decide=None, preference=None):
        if preference is not None:
            chosen.preference = PREFERENCE_NAMES[preference]
        lst = InvitationListener(chosen, decide)
        made.append(lst)
        return lst
    yield inviter, chosen, make
    for lst in made:
        lst.close()
    inviter.close()
    chosen.close()


def test_accept_then_session_connection(pair):
    inviter, chosen, make = pair
    lst = make(lambda conn, inv: "accept")
    response, sc, why = invite_and_connect(inviter, [("127.0.0.1", lst.port)], chosen.peer_id, b"ctx", 5)
    assert (response, why) == (1, None)
    assert sc.connected and sc.peer_hello.purpose == 0 and sc.purpose == 1
    ev = lst.events.wait(lambda e: e.kind == "invitation", 1)
    assert ev.data["context"] == b"ctx" and ev.peer.identifier == inviter.peer_id.identifier
    hello = ev.data["conn"].peer_hello
    assert hello.purpose == 2 and hello.token == bytes(16)
    assert (hello.listen_port, hello.datagram_port, hello.datagram_receiver_id) == (0, 0, 0)


@pytest.mark.parametrize("answer,want", [("decline", 2), (3, 3), (4, 4), (5, 5)])
def test_other_answers(pair, answer, want):
    inviter, chosen, make = pair
    lst = make(lambda conn, inv: answer)
    response, conn, why = invite(inviter, [("127.0.0.1", lst.port)], chosen.peer_id, b"", 5)
    assert response == want


def test_unanswered_is_timed_out(pair):
    inviter, chosen, make = pair
    lst = make()
    response, conn, why = invite(inviter, [("127.0.0.1", lst.port)], chosen.peer_id, b"", 0.5)
    assert response == 3


def test_encryption_incompatible_from_the_chosen_session(pair):
    inviter, chosen, make = pair
    lst = make(lambda conn, inv: "accept", preference="none")
    response, conn, why = invite(inviter, [("127.0.0.1", lst.port)], chosen.peer_id, b"", 5)
    assert response == 5


def test_listener_speaks_optional_without_identity(pair):
    inviter, chosen, make = pair
    lst = make(lambda conn, inv: "decline")
    response, conn, why = invite(inviter, [("127.0.0.1", lst.port)], chosen.peer_id, b"", 5)
    assert response == 2
    assert conn.peer_preamble.preference == 0 and not conn.peer_preamble.has_identity
    assert conn.peer_hello.purpose == 0 and conn.peer_hello.peer_id == chosen.peer_id
    assert (conn.peer_hello.listen_port, conn.peer_hello.datagram_port) == (0, 0)


def test_oversized_context_is_a_violation(pair):
    inviter, chosen, make = pair
    lst = make(lambda conn, inv: "decline")
    m = inviter.events.mark()
    raw = (1000).to_bytes(4, "big") + (4097).to_bytes(2, "big") + bytes(4097)
    response, conn, why = invite(inviter, [("127.0.0.1", lst.port)], chosen.peer_id, b"", 2,
                                 raw_invitation=raw)
    assert response is None
    bye = inviter.events.wait(lambda e: e.kind == "goodbye" and e.data["conn"] is conn, 2, since=m)
    assert bye is not None and bye.data["reason"] == 1


def test_unreachable():
    s = Session("x", "required", listen=False, datagrams=False)
    try:
        assert invite(s, [("127.0.0.1", 1)], PeerID.new("y"), b"", 1)[2] == "unreachable"
    finally:
        s.close()


def test_txt_record_order_and_rules():
    p = PeerID(bytes(range(16)), "Zoë")
    strings = D.txt_strings(p, {"k": "v"})
    assert strings == [b"txtvers=1", b"mpcid=000102030405060708090a0b0c0d0e0f", "mpcdn=Zoë".encode(), b"k=v"]
    assert D.decode_txt(D.encode_txt(strings)) == strings
    assert D.parse_txt(strings) == ("000102030405060708090a0b0c0d0e0f", "Zoë", {"k": "v"})
    assert D.parse_txt(strings, own_identifier=bytes(range(16))) is None
    assert D.parse_txt([b"mpcdn=x"]) is None
    assert D.parse_txt([b"mpcid=" + b"A" * 32, b"mpcdn=x"]) is None        # upper-case hex
    assert D.parse_txt([b"mpcid=" + b"a" * 32, b"mpcdn="]) is None         # empty name
    got = D.parse_txt([b"noequals", b"mpcid=" + b"a" * 32, b"mpcdn=x", b"mpcdn=y", b"k=1", b"k=2"])
    assert got == ("a" * 32, "x", {"k": "1"})
    with pytest.raises(ValueError):
        D.txt_strings(p, {"mpcid": "x"})
    assert D.instance_name(p.identifier, "mpc-interop") == "000102030405060708090a0b0c0d0e0f._mpc-interop._tcp.local."
    assert D.host_name(p.identifier, "mpc-interop") == "mpc-000102030405060708090a0b0c0d0e0f-mpc-interop.local."


def test_zeroconf_refused_outside_a_namespace(monkeypatch):
    monkeypatch.delenv("INTEROP_MULTICAST", raising=False)
    with pytest.raises(RuntimeError):
        D.zeroconf_on_loopback()
