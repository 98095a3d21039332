# apt_get: apt-get that waits, bounded, for another apt or dpkg process to
# let go of its lock instead of failing at once (sourced by the scripts that
# install packages: scripts/setup.sh, scripts/fuzz.sh, bench/torch_step.sh).
#
# Why: on a fresh machine unattended-upgrades or cloud-init often hold the
# lock for the first minutes, and a setup that fails then is a setup the user
# has to rerun by hand.
#
# How: apt's own -o DPkg::Lock::Timeout=S makes install wait for the dpkg
# locks; apt 2.6 (Debian 12) does not apply it to the package lists' lock
# that update takes (/var/lib/apt/lists/lock: "Could not get lock ...",
# exit 100 at once), so a run that failed on a lock is run again every
# second until it gets through or S seconds (CLEAVE_APT_LOCK_TIMEOUT,
# default 600) have passed since the first try. Its output goes where the
# caller sends it; a wait is announced once on the standard error the
# script had when it sourced this file.
APT_LOCK_TIMEOUT=${CLEAVE_APT_LOCK_TIMEOUT:-600}
case "$APT_LOCK_TIMEOUT" in ''|*[!0-9]*) APT_LOCK_TIMEOUT=600 ;; esac
exec {apt_say_fd}>&2 # the standard error the script started with: callers send apt's output to logs

apt_get() {
    local deadline=$((SECONDS + APT_LOCK_TIMEOUT)) said=0 rc log
    log=$(mktemp "${TMPDIR:-/tmp}/cleave-apt.XXXXXX") || return 1
    while :; do
        if apt-get -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" "$@" >"$log" 2>&1; then rc=0; else rc=$?; fi
        if [ "$rc" -ne 0 ] && grep -q "Could not get lock\|Unable to lock\|Unable to acquire the dpkg" "$log" &&
            [ "$SECONDS" -lt "$deadline" ]; then
            if [ "$said" -eq 0 ]; then
                echo "apt-get $1: another process holds apt's lock ($(grep -m1 -o 'lock [^ ]*' "$log" | sed 's/^lock //; s/[.]$//')); waiting up to ${APT_LOCK_TIMEOUT} s" >&"$apt_say_fd"
                said=1
            fi
            sleep 1
            continue
        fi
        cat "$log"
        rm -f "$log"
        return "$rc"
    done
}
