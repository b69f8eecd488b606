"""The JIT build child: import the submission's modules once, compiling every ``load_inline``/``load`` they call.

Started by :mod:`jit_build` through the build stage's runner (the same sandbox as ``build.sh``), with a private
``TORCH_EXTENSIONS_DIR`` and ``TRITON_CACHE_DIR``. For each call the real torch function compiles (ninja and
the compiler may run here, never in the candidate worker); the built library is copied to
``<artefacts>/<key>/`` and recorded in the manifest with the key the worker's router computes
(``workers.jit_load.call_key``). A module whose import fails (a compile error, say) is recorded with its message,
which holds the compiler's output; the others are unaffected. Never imports pytest or the judge.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_cannbench.workers.jit_load import Extension, Manifest, call_key

MESSAGE_CHARS = 6000


def _recorder(manifest: Manifest, artefacts: Path) -> None:
    """Wrap ``load_inline``/``load``: compile as torch does, then keep the library under its key."""
    from torch.utils import cpp_extension

    built: list[tuple[str, str, bool]] = []
    importer = cpp_extension._import_module_from_library

    def record_import(module_name: str, path: str, is_python_module: bool) -> Any:
        built.append((module_name, path, is_python_module))
        return importer(module_name, path, is_python_module)

    cpp_extension._import_module_from_library = record_import

    def wrap(kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def compile_and_record(*args: Any, **kwargs: Any) -> Any:
            key, name, python_module = call_key(original, kind, args, kwargs)
            del built[:]
            result = original(*args, **kwargs)
            if not built:  # is_standalone: an executable, not a library the worker could load
                raise RuntimeError(f"{kind}(name={name!r}) built no loadable library (is_standalone is not supported)")
            module_name, path, _ = built[-1]
            target = artefacts / key
            target.mkdir(parents=True, exist_ok=True)
            library = f"{module_name}{cpp_extension.LIB_EXT}"
            shutil.copy2(os.path.join(path, library), target / library)
            if manifest.find(key) is None:
                manifest.extensions.append(Extension(key=key, name=name, module_name=module_name,
                                                     directory=str(target), python_module=python_module))
            print(f"cannbench-jit: built {name} as {module_name} (key {key})", flush=True)
            return result
        return compile_and_record

    cpp_extension.load_inline = wrap("load_inline", cpp_extension.load_inline)
    cpp_extension.load = wrap("load", cpp_extension.load)


def _import(label: str, path: str | None) -> None:
    if path is None:
        importlib.import_module(label)
        return
    spec = importlib.util.spec_from_file_location(f"cannbench_jit_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--artefacts", required=True)
    parser.add_argument("--site", default="", help="a private install to import cann_bench from")
    parser.add_argument("--package", action="append", default=[], help="a package to import from --site")
    parser.add_argument("--module", action="append", default=[], help="LABEL=PATH of a module file to import")
    args = parser.parse_args(argv)
    if args.site:
        sys.path.insert(0, args.site)
    manifest = Manifest()
    artefacts = Path(args.artefacts)
    artefacts.mkdir(parents=True, exist_ok=True)
    _recorder(manifest, artefacts)
    todo: list[tuple[str, str | None]] = [(p, None) for p in args.package]
    todo += [(m.split("=", 1)[0], m.split("=", 1)[1]) for m in args.module]
    for label, path in todo:
        print(f"cannbench-jit: importing {label}", flush=True)
        try:
            _import(label, path)
            manifest.modules[label] = ""
        except BaseException as exc:  # noqa: BLE001 - the module's failure, recorded for its cases
            traceback.print_exc()
            manifest.modules[label] = f"{type(exc).__name__}: {exc}"[:MESSAGE_CHARS]
        Path(args.manifest).write_text(manifest.to_json())  # kept up to date: a timeout keeps what finished
    return 0


if __name__ == "__main__":
    sys.exit(main())
