#!/usr/bin/env bash
# scripts/setup.sh waits for another apt process's lock, bounded, instead of
# failing at once (issue 27). With stand-ins for apt-get and dpkg-query first
# on PATH (every package reported missing; apt-get recording its arguments
# and failing `update` on the package lists' lock as apt 2.6 does, exit 100
# with "Could not get lock /var/lib/apt/lists/lock"):
# - locked for the first two tries: setup says once that it waits, then
#   updates and installs, exit 0; every apt-get call carries
#   -o DPkg::Lock::Timeout (apt's own wait, for install's dpkg lock);
# - locked for good under CLEAVE_APT_LOCK_TIMEOUT=2: setup fails within a
#   few seconds, showing apt's message;
# - no apt-get call in scripts/ or bench/ goes around apt_get.
# The data steps find data/ prepared (the tests need it) and do nothing.
set -u
source "$(dirname "$0")/lib.sh"
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: setup.sh installs only as root"
    finish cli_setup_apt
    exit
fi
mkdir -p "$tmp/bin"
cat > "$tmp/bin/apt-get" <<EOF
#!/bin/bash
echo "\$*" >> "$tmp/calls"
case " \$* " in *" update "*)
    n=\$(cat "$tmp/updates" 2>/dev/null || echo 0); echo \$((n + 1)) > "$tmp/updates"
    if [ "\$n" -lt "\$LOCKED_TRIES" ]; then
        echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"
        echo "E: Unable to lock directory /var/lib/apt/lists/"
        exit 100
    fi ;;
esac
exit 0
EOF
printf '#!/bin/sh\nprintf "unknown ok not-installed"\n' > "$tmp/bin/dpkg-query"
chmod +x "$tmp/bin/apt-get" "$tmp/bin/dpkg-query"

LOCKED_TRIES=2 PATH="$tmp/bin:$PATH" bash scripts/setup.sh > "$tmp/out" 2> "$tmp/err"
_rc=$?
check '[ $_rc -eq 0 ] && [ "$(cat "$tmp/updates" 2>/dev/null)" = 3 ] && grep -q "^installed " "$tmp/out"' \
    "setup with the lists locked for two tries: exit $_rc, $(cat "$tmp/updates" 2>/dev/null) updates$(excerpt 4 "$(cat "$tmp/err")")"
check '[ "$(grep -c "waiting up to" "$tmp/err")" = 1 ] && grep -q "/var/lib/apt/lists/lock" "$tmp/err"' \
    "setup did not say once that it waits for the lock$(excerpt 4 "$(cat "$tmp/err")")"
check 'grep -q "install" "$tmp/calls" && ! grep -v -q -- "-o DPkg::Lock::Timeout=[0-9]" "$tmp/calls"' \
    "an apt-get call without -o DPkg::Lock::Timeout$(excerpt 5 "$(cat "$tmp/calls")")"

rm -f "$tmp/updates"
start=$SECONDS
CLEAVE_APT_LOCK_TIMEOUT=2 LOCKED_TRIES=1000 PATH="$tmp/bin:$PATH" bash scripts/setup.sh > "$tmp/out" 2> "$tmp/err"
_rc=$?; took=$((SECONDS - start))
check '[ $_rc -ne 0 ] && [ $took -lt 30 ] && grep -q "Could not get lock /var/lib/apt/lists/lock" "$tmp/err" && grep -q "apt-get update failed" "$tmp/err"' \
    "setup with the lists locked for good: exit $_rc after $took s$(excerpt 4 "$(cat "$tmp/err")")"

raw=$(grep -n "apt-get \(update\|install\|download\|upgrade\|remove\)" scripts/*.sh bench/*.sh | grep -v "^scripts/apt_lock.sh" |
      grep -v ':[0-9]*: *#' | grep -v 'echo\|die \|"[^"]*apt-get [a-z]* [^"]*"')
check '[ -z "$raw" ]' "apt-get called around apt_get:$(excerpt 5 "$raw")"
finish cli_setup_apt
