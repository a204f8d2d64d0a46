"""Start the Streamlit server with the first page's work already under way.

The page a user opens first (Graph & passes: ResNet-18 through the tuning pipeline, after
FuseOps) needs TVM imported, the model imported, the pipeline run and two graphs laid out: about
four seconds on a loaded 2-core machine, all of it on the first session's clock when done on
demand. Run as ``python -m app.warm_start run app/main.py [streamlit options]`` (what
``streamlit run`` takes), this module starts that work in a background thread of the server
process and then starts the server: the work overlaps the server start and the browser loading
the app, and fills the same ``st.cache_resource`` caches the page reads.

It is also where the server is guarded: ``--allow-origin URL`` options given before ``run`` add
origins to ``app.ui_guard``'s allow-list, and the guard is put in front of the ASGI app Streamlit
builds, so that no request or websocket reaches Streamlit with a foreign ``Host`` or ``Origin``.
Without that hook (another Streamlit version) the server does not start.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Sequence

from app.ui_guard import Origin, OriginGuard, parse_origin


def warm() -> None:
    """Fill the caches of the default Graph & passes view (errors are left to the page)."""
    try:
        import pandas  # noqa: F401 - what the page imports, imported once here

        import app.components
        import app.graph_view  # noqa: F401
        from app.cache import RunKey, run_graphs
        from explorer.models import DEFAULT_MODEL
        from explorer.passes import PIPELINES

        graphs = run_graphs(RunKey(model=DEFAULT_MODEL, shapes="", pipeline=next(iter(PIPELINES)), passes=()))
        fuse = graphs.run.find("FuseOps")
        if fuse is not None:
            graphs.payload(graphs.run.input_index(fuse.index))
            graphs.payload(fuse.index)
    except Exception:  # a warm-up never stops the server; the page shows the error itself
        logging.getLogger(__name__).debug("warm-up failed", exc_info=True)


def guard_server(extra: Sequence[Origin] = ()) -> None:
    """Wrap the app Streamlit's server builds in ``OriginGuard`` (see ``app/ui_guard.py``);
    RuntimeError when this Streamlit builds it elsewhere (serving unguarded is not an option)."""
    try:
        from streamlit.web.server.starlette import starlette_server

        build = starlette_server.create_starlette_app
    except (ImportError, AttributeError) as err:
        raise RuntimeError(f"this Streamlit builds its server elsewhere ({err}): the UI could not check Host and "
                           f"Origin, so it does not start (Streamlit 1.67 is known to work)") from err

    def guarded(runtime):
        return OriginGuard(build(runtime), extra=extra)

    starlette_server.create_starlette_app = guarded


def _split_args(argv: list[str]) -> tuple[list[Origin], list[str]]:
    """Leading ``--allow-origin URL`` pairs (ours) and the rest (Streamlit's)."""
    extra = []
    while len(argv) >= 2 and argv[0] == "--allow-origin":
        extra.append(parse_origin(argv[1]))
        argv = argv[2:]
    return extra, argv


def main() -> None:
    # Libraries both threads import are imported here first: two threads importing pandas at once
    # can see it half-initialised ("partially initialized module 'pandas'") and kill the server.
    import pandas  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    from streamlit.web import cli

    try:
        extra, args = _split_args(sys.argv[1:])
        guard_server(extra)  # before the warm-up thread starts importing streamlit's modules too
    except (RuntimeError, ValueError) as err:
        sys.exit(f"Error: {err}")
    threading.Thread(target=warm, daemon=True, name="schedx-warm-start").start()

    sys.argv = ["streamlit", *args]
    cli.main()


if __name__ == "__main__":
    main()
