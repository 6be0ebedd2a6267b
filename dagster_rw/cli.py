"""The `dagster-rw` command: run SQL, an interactive shell, status, continuous mode, the demo and the
sqllogictest runner."""
from __future__ import annotations

import argparse
import os
import sys
import warnings

warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")


def _connect(args):
    import dagster_rw

    options = {}
    if getattr(args, "engine", None):
        options["engine"] = args.engine
    return dagster_rw.connect(args.warehouse, spark=args.spark, **options)


def _print_rows(cur, out=sys.stdout):
    if cur.description is None:
        if cur.rowcount >= 0:
            print(f"OK ({cur.rowcount} rows)", file=out)
        else:
            print("OK", file=out)
        return
    from .slt import format_value

    names = [d[0] for d in cur.description]
    rows = [[format_value(v) for v in r] for r in cur.fetchall()]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
    print(" | ".join(n.ljust(w) for n, w in zip(names, widths)), file=out)
    print("-+-".join("-" * w for w in widths), file=out)
    for r in rows:
        print(" | ".join(v.ljust(w) for v, w in zip(r, widths)), file=out)
    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", file=out)


def cmd_sql(args) -> int:
    import dagster_rw

    from .sql.statements import split

    text = args.statement
    if args.file:
        with open(args.file) as f:
            text = f.read()
    if not text:
        print("give a statement or --file", file=sys.stderr)
        return 2
    conn = _connect(args)
    try:
        for statement in split(text):
            _print_rows(conn.execute(statement))
    except dagster_rw.Error as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_shell(args) -> int:
    import dagster_rw

    from .sql.statements import split

    conn = _connect(args)
    print(f"dagster-rw shell on {conn.wh.store.url} (end statements with ';', \\q to quit)")
    buffer = ""
    while True:
        try:
            line = input("rw=> " if not buffer else "rw-> ")
        except EOFError:
            print()
            return 0
        if line.strip() in ("\\q", "quit", "exit"):
            return 0
        buffer += line + "\n"
        if not buffer.strip().endswith(";"):
            continue
        try:
            for statement in split(buffer):
                _print_rows(conn.execute(statement))
        except dagster_rw.Error as e:
            print(f"ERROR: {e}")
        buffer = ""


def cmd_status(args) -> int:
    conn = _connect(args)
    rows = conn.status()
    cols = ["name", "kind", "epoch", "lag_epochs", "state_rows", "sst_files", "step_seconds"]
    print("  ".join(c.ljust(18) for c in cols))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(18) for c in cols))
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.warehouse or os.path.join(os.getcwd(), ".dagster_rw_demo"), epochs=args.epochs,
                    rows=args.rows)


def cmd_deploy(args) -> int:
    from .dagster.deploy import deploy
    from .dagster.project import RwProject

    with _connect(args) as conn:
        created = deploy(conn, RwProject(args.project))
    print(f"created: {', '.join(created)}" if created else "nothing to create: every object exists")
    return 0


def cmd_run(args) -> int:
    """Continuous mode until SIGTERM or SIGINT: the tick in progress finishes, then the loop stops."""
    import logging
    import signal
    import threading

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    say = logging.getLogger("dagster_rw.continuous")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with _connect(args) as conn:
        report = None
        if args.dagster:
            import dagster as dg

            from .dagster.continuous import EpochReporter
            from .dagster.project import RwProject

            report = EpochReporter(dg.DagsterInstance.get(), conn, RwProject(args.project) if args.project else None)

        def on_epoch(tick):
            say.info("epoch %d: %d object(s) advanced in %.3f s", tick.epoch, len(tick.advanced), tick.seconds)
            if report is not None:
                report(tick)

        say.info("continuous mode on %s: a barrier every %.3g s while inputs have something new",
                 args.warehouse or "./.dagster_rw", args.interval)
        conn.run(interval=args.interval, stop=stop, on_epoch=on_epoch, max_ticks=args.max_epochs)
    say.info("continuous mode stopped")
    return 0


def cmd_slt(args) -> int:
    from .slt import main as slt_main

    return slt_main(args.paths, warehouse=args.warehouse, verbose=args.verbose)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dagster-rw", description=__doc__)
    p.add_argument("--warehouse", "-w", default=os.environ.get("DAGSTER_RW_WAREHOUSE"),
                   help="local folder, file:// or s3:// URL (default ./.dagster_rw)")
    p.add_argument("--spark", default=os.environ.get("DAGSTER_RW_SPARK"),
                   help="Spark Connect URL sc://host:port (default: an embedded local session when needed)")
    p.add_argument("--engine", choices=["auto", "duckdb", "spark"], default=None)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sql", help="run SQL statements")
    s.add_argument("statement", nargs="?")
    s.add_argument("--file", "-f")
    s.set_defaults(func=cmd_sql)
    sub.add_parser("shell", help="interactive SQL shell").set_defaults(func=cmd_shell)
    sub.add_parser("status", help="epoch and lag per object").set_defaults(func=cmd_status)
    d = sub.add_parser("demo", help="create tables and views, stream changes through several epochs")
    d.add_argument("--epochs", type=int, default=5)
    d.add_argument("--rows", type=int, default=20000)
    d.set_defaults(func=cmd_demo)
    dp = sub.add_parser("deploy", help="create the objects a SQL project folder declares that the warehouse lacks")
    dp.add_argument("project")
    dp.set_defaults(func=cmd_deploy)
    r = sub.add_parser("run", help="continuous mode: FLUSH every interval while inputs have something new")
    r.add_argument("--interval", type=float, default=1.0, help="seconds between barriers (default 1)")
    r.add_argument("--dagster", action="store_true",
                   help="report each committed epoch to the Dagster instance of DAGSTER_HOME as runless materializations")
    r.add_argument("--project", help="SQL project folder: asset keys as its Dagster assets name them")
    r.add_argument("--max-epochs", type=int, default=None, help="stop after this many epochs (default: never)")
    r.set_defaults(func=cmd_run)
    t = sub.add_parser("slt", help="run sqllogictest files")
    t.add_argument("paths", nargs="+")
    t.add_argument("--verbose", "-v", action="store_true")
    t.set_defaults(func=cmd_slt)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
