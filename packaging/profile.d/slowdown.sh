# slowdown: the login notice, installed as /etc/profile.d/slowdown.sh.
#
# At an interactive login, `slowdown motd` prints one line while a filesystem this node
# probes is slow ("work is 12x slower than usual right now (most nodes see it: the
# filesystem)") and nothing otherwise. Off unless /etc/slowdown/slowdown.toml says
#   [motd]
#   enabled = true
# It reads only the node's own database, never a probed filesystem, gives up silently at
# its deadline ([motd] deadline, 100 ms by default) and always exits 0; `timeout` bounds it
# once more here (1 s, SIGKILL), should Python itself not start in time. Its errors are
# never shown: a login must not fail or wait because of it.
case $- in
    *i*)
        if [ -r /etc/slowdown/slowdown.toml ] && command -v slowdown >/dev/null 2>&1; then
            if command -v timeout >/dev/null 2>&1; then
                timeout -s KILL 1 slowdown motd --config /etc/slowdown/slowdown.toml \
                    2>/dev/null || true
            else
                slowdown motd --config /etc/slowdown/slowdown.toml 2>/dev/null || true
            fi
        fi
        ;;
esac
