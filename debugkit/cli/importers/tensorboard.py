"""``debugkit import tensorboard TB_DIR RUN_DIR``: TensorBoard scalars as a debugkit run."""

from __future__ import annotations


def register(kinds) -> None:
    p = kinds.add_parser(
        "tensorboard", help="convert TensorBoard event files (scalars) into a debugkit run",
        description="Tags matching --grad-pattern become gradient norms (layer = the pattern's "
                    "'layer' group, '/' read as '.'; 'total' is the total norm); every other "
                    "scalar tag becomes a scalar. Each folder of event files is one run: with "
                    "several, RUN_DIR holds one run per folder.")
    p.add_argument("tb_dir", metavar="TB_DIR", help="TensorBoard log directory")
    p.add_argument("run_dir", metavar="RUN_DIR", help="debugkit run directory to create (must not exist)")
    p.add_argument("--grad-pattern", default=None,
                   help=r"regex with a (?P<layer>...) group; default: ^grad_norm/(?P<layer>.+)$")
    p.add_argument("--name", default=None, help="display name of the run")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ...io.tensorboard import convert_tensorboard
    from .._output import print_json, print_table

    results = convert_tensorboard(args.tb_dir, args.run_dir, grad_pattern=args.grad_pattern,
                                  name=args.name)
    if args.json:
        print_json({"runs": results})
        return 0
    print_table([{**r, "layers": len(r["layers"])} for r in results],
                ["path", "steps", "layers", "grad_rows", "scalar_rows"])
    return 0
