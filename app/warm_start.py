"""Start the Streamlit server with the first page's work already under way.

The page a user opens first (Graph & passes: ResNet-18 through the tuning pipeline, after
FuseOps) needs TVM imported, the model imported, the pipeline run and two graphs laid out: about
four seconds on a loaded 2-core machine, all of it on the first session's clock when done on
demand. Run as ``python -m app.warm_start run app/main.py [streamlit options]`` (what
``streamlit run`` takes), this module starts that work in a background thread of the server
process and then starts the server: the work overlaps the server start and the browser loading
the app, and fills the same ``st.cache_resource`` caches the page reads.
"""

from __future__ import annotations

import logging
import sys
import threading


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


def main() -> None:
    # Libraries both threads import are imported here first: two threads importing pandas at once
    # can see it half-initialised ("partially initialized module 'pandas'") and kill the server.
    import pandas  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    from streamlit.web import cli

    threading.Thread(target=warm, daemon=True, name="schedx-warm-start").start()

    sys.argv = ["streamlit", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
