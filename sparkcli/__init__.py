"""sparkpanel: the command line for a (remote) SparkPanel, a client of its JSON API.

It needs only httpx (no Django): install the package on a laptop or CI box and run
`sparkpanel …`, or `python -m sparkcli …`, or on the panel machine `manage.py spark …`.

    export SPARKPANEL_URL=http://spark-panel:8000 SPARKPANEL_TOKEN=spk_…
    JOB=$(sparkpanel queue --recipe nemotron-3-super-official --host spark-01 --suite "Quick check")
    sparkpanel wait "$JOB" --timeout 3600
    sparkpanel compare "$BASELINE" "$JOB" --max-decode-drop 5

client.py talks to the panel (URL, token, errors, exit codes, retries), commands.py has one
function per command, compare.py the comparison and its regression check, render.py what is
printed, parser.py the arguments, program.py `main`.
"""

from sparkcli.program import main

__all__ = ["main"]
