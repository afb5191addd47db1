"""``debugkit scan-dataset MODULE:FUNCTION --spec SPEC.json``: every sample that breaks a
batch spec, by dataset index.

Exit codes: 0 no violation, 1 violations found, 2 bad input (spec file, module,
function, not a dataset). The walk itself is :func:`debugkit.recorder.scan.scan_dataset`.
"""

from __future__ import annotations

from ._output import print_json, print_table

EXIT_VIOLATIONS = 1

MSG_TARGET = "{target!r}: expected MODULE:FUNCTION, e.g. mypkg.data:build_dataset"
MSG_IMPORT = "{target}: cannot import module {module!r} ({detail})"
MSG_NO_FUNCTION = "{target}: module {module!r} has no attribute {name!r}"
MSG_NOT_CALLABLE = "{target}: {name!r} is a {kind}, expected a function"
MSG_KWARGS = "--kwargs {value!r}: expected a JSON object, e.g. '{{\"split\": \"train\"}}'"
MSG_BUILD_FAILED = "{target}: calling it raised {error_type}: {detail}"


def register(sub) -> None:
    p = sub.add_parser("scan-dataset", help="check every sample of a dataset against a batch spec")
    p.add_argument("target", metavar="MODULE:FUNCTION",
                   help="function returning the dataset (a torch Dataset, DataLoader or iterable); "
                        "MODULE is imported with the current directory on sys.path")
    p.add_argument("--spec", required=True, help="batch spec JSON (BatchSpec.save)")
    p.add_argument("--kwargs", default=None, metavar="JSON",
                   help="keyword arguments for FUNCTION, a JSON object")
    p.add_argument("--batch-size", type=int, default=256, help="scan batch size (default: 256)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (default: 0)")
    p.add_argument("--max-seconds", type=float, default=600.0,
                   help="stop after this many seconds (default: 600)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="scan the first N samples")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def load_target(target: str, kwargs_json: str | None = None):
    """Import ``MODULE`` (cwd on sys.path) and return ``FUNCTION(**kwargs)``."""
    import importlib
    import json
    import os
    import sys

    from ..errors import InvalidInputError

    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        raise InvalidInputError(MSG_TARGET.format(target=target))
    kwargs = {}
    if kwargs_json is not None:
        try:
            kwargs = json.loads(kwargs_json)
        except ValueError:
            kwargs = None
        if not isinstance(kwargs, dict):
            raise InvalidInputError(MSG_KWARGS.format(value=kwargs_json))
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # ImportError or an error raised by the module's own code
        detail = f"{type(exc).__name__}: {exc}"
        raise InvalidInputError(MSG_IMPORT.format(target=target, module=module,
                                                  detail=detail)) from None
    fn = mod
    for part in name.split("."):
        if not hasattr(fn, part):
            raise InvalidInputError(MSG_NO_FUNCTION.format(target=target, module=module, name=name))
        fn = getattr(fn, part)
    if not callable(fn):
        raise InvalidInputError(MSG_NOT_CALLABLE.format(target=target, name=name,
                                                        kind=type(fn).__name__))
    try:
        return fn(**kwargs)
    except Exception as exc:
        raise InvalidInputError(MSG_BUILD_FAILED.format(target=target, error_type=type(exc).__name__,
                                                        detail=exc)) from None


def run(args) -> int:
    from ..recorder.batchspec import BatchSpec
    from ..recorder.scan import as_dataset, scan_dataset

    spec = BatchSpec.load(args.spec)  # a bad spec fails before the user's code runs
    dataset = load_target(args.target, args.kwargs)
    as_dataset(dataset, what=f"{args.target} returned a value that")
    report = scan_dataset(dataset, spec, batch_size=args.batch_size, num_workers=args.workers,
                          max_seconds=args.max_seconds, limit=args.limit)
    out = {"dataset": args.target, "spec": args.spec, **report}
    if args.json:
        print_json(out)
    else:
        _print_text(out)
    return EXIT_VIOLATIONS if report["violations"] else 0


def _print_text(out: dict) -> None:
    n_bad = len(out["violating_indices"])
    head = (f"{out['dataset']}: {out['samples']} sample(s) scanned in {out['seconds']:.1f} s, "
            f"{len(out['violations'])} violation(s) at {n_bad} dataset index(es)")
    if not out["complete"]:
        why = {"time": "--max-seconds reached", "limit": "--limit reached"}[out["stopped"]]
        head += f"; stopped early ({why}), not every sample was scanned"
    print(head)
    if out["violations"]:
        print_table(out["violations"], ["index", "tensor", "rule", "message"])
