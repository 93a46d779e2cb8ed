# Sourced by scripts/cluster.sh and scripts/engines.sh: stopping a daemon and waiting until
# it is gone, so that an "up" right after starts it again and none is left half-stopped.
# The caller defines log().

running() {  # PID: the process exists and is not a zombie
    local stat
    read -r stat 2>/dev/null < "/proc/$1/stat" || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

wait_gone() {  # SECONDS PID...: true once no PID exists any more (a zombie reaped too)
    local end=$((SECONDS + $1)) p left; shift
    while :; do
        left=0
        for p; do [ -e "/proc/$p" ] && left=1; done
        [ "$left" = 0 ] && return 0
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.1
    done
}

stop() {  # WHAT PID...: SIGTERM, SIGKILL after 30 s; back once each is gone
    local what=$1 p pids=(); shift
    for p; do running "$p" && pids+=("$p"); done
    [ ${#pids[@]} -gt 0 ] || return 0
    log "stopping $what (pid ${pids[*]})"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait_gone 30 "${pids[@]}" && return 0
    for p in "${pids[@]}"; do
        if running "$p"; then
            log "$what: pid $p still running after 30 s: SIGKILL"
            kill -KILL "$p" 2>/dev/null || true
        fi
    done
    wait_gone 5 "${pids[@]}" && return 0
    # a zombie's parent reaps it; the daemons' parent is init, or test.sh (a subreaper)
    log "$what: pid $(for p in "${pids[@]}"; do [ -e "/proc/$p" ] && printf '%s ' "$p"; done)not reaped by its parent yet"
}
