#!/usr/bin/env bash
# Avahi as an independent mDNS peer for interop tests, run inside a network namespace the test
# made (never on the real network): a private D-Bus system bus and an avahi-daemon on interface
# mp0 only (or those AVAHI_INTERFACES lists, comma-separated), then one client until standard
# input ends.
#   avahi_peer.sh browse SERVICE                 avahi-browse -rp, each line printed as it comes
#   avahi_peer.sh publish NAME SERVICE PORT TXT...  avahi-publish -s; prints PUBLISHED
#   avahi_peer.sh daemon                          no client: prints DAEMON <bus address> for a
#                                                 program of ours to use; then each input line
#                                                 `kill` (SIGKILL the daemon, prints KILLED) or
#                                                 `start` (a new daemon, prints STARTED)
set -u
dir=$(mktemp -d)
pids=()
daemon=
# SIGKILL: a test's children inherit SIGTERM blocked. The client goes first, so the daemon
# withdraws what it published (goodbyes) before it goes too.
cleanup() {
  for (( i=${#pids[@]}-1; i>=0; i-- )); do
    pkill -KILL -P "${pids[$i]}" 2>/dev/null
    kill -KILL "${pids[$i]}" 2>/dev/null
    [ "$i" -eq $(( ${#pids[@]}-1 )) ] && sleep 0.5
  done
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
cat > "$dir/bus.conf" <<X
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path=$dir/dbus.sock</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_type="method_call"/><allow send_destination="*"/><allow receive_type="*"/></policy></busconfig>
X
cat > "$dir/avahi.conf" <<X
[server]
allow-interfaces=${AVAHI_INTERFACES:-mp0}
use-ipv4=yes
use-ipv6=no
enable-dbus=yes
[wide-area]
enable-wide-area=no
[publish]
publish-workstation=no
publish-hinfo=no
X
dbus-daemon --config-file="$dir/bus.conf" --nofork --nopidfile >/dev/null 2>&1 & pids+=($!)
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$dir/dbus.sock
for _ in $(seq 50); do [ -S "$dir/dbus.sock" ] && break; sleep 0.1; done
mkdir -p /run/avahi-daemon
# `ip netns exec` gave this script a mount namespace of its own: a private /run/avahi-daemon
# there lets one daemon run per namespace (the pid file and socket live in it).
if [ "$(readlink /proc/self/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] && mount -t tmpfs tmpfs /run/avahi-daemon 2>/dev/null; then
  private_run=yes
else
  private_run=no
fi

# Starts a daemon (pid in $daemon) and waits up to 10 s for it to be ready.
start_daemon() {
  local log="$dir/avahi.$(date +%s%N).log"
  if [ "$private_run" = yes ]; then
    rm -f /run/avahi-daemon/pid
  else
    # A daemon an earlier test killed may linger as a zombie until it is reaped, and its pid
    # file would stop this one: wait for it to go, then drop the stale file (never a live daemon's).
    local old
    old=$(cat /run/avahi-daemon/pid 2>/dev/null)
    if [ -n "$old" ]; then
      for _ in $(seq 30); do
        state=$(ps -o stat= -p "$old" 2>/dev/null)
        if [ -z "$state" ] || [[ "$state" == Z* ]]; then rm -f /run/avahi-daemon/pid; break; fi
        sleep 0.1
      done
    fi
  fi
  timeout 120 avahi-daemon -f "$dir/avahi.conf" --no-drop-root --no-chroot --no-rlimits >"$log" 2>&1 & daemon=$!
  pids+=($daemon)
  for _ in $(seq 100); do grep -qs "Server startup complete" "$log" && break; sleep 0.1; done
  if ! grep -qs "Server startup complete" "$log"; then
    echo "avahi-daemon did not start:" >&2
    cat "$log" >&2
  fi
}

start_daemon
case "$1" in
  browse)
    stdbuf -oL timeout 120 avahi-browse -r -p "_$2._tcp" & pids+=($!)
    echo BROWSING
    ;;
  publish)
    name=$2 service=$3 port=$4
    shift 4
    timeout 120 avahi-publish -s "$name" "_$service._tcp" "$port" "$@" >"$dir/publish.log" 2>&1 & pids+=($!)
    for _ in $(seq 100); do grep -q "Established" "$dir/publish.log" && break; sleep 0.1; done
    echo PUBLISHED
    ;;
  daemon)
    echo "DAEMON $DBUS_SYSTEM_BUS_ADDRESS"
    while read -r command; do
      case "$command" in
        kill)
          pkill -KILL -P "$daemon" 2>/dev/null
          kill -KILL "$daemon" 2>/dev/null
          wait "$daemon" 2>/dev/null
          echo KILLED
          ;;
        start)
          start_daemon
          echo STARTED
          ;;
      esac
    done
    exit 0
    ;;
  *) echo "usage: avahi_peer.sh browse SERVICE | publish NAME SERVICE PORT TXT... | daemon" >&2; exit 2 ;;
esac
cat >/dev/null  # until standard input ends
