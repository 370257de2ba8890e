"""``slowdown-probe``: the measuring side's command line (prepare, cleanup, run, check-config,
systemd-dropin, publish). The top probe room: it may import every other probe room and
``slowdown.analysis`` except its command line; nothing imports it."""
