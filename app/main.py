"""Entry of the schedx UI: declares the pages, nothing else (``schedx ui`` runs this file)."""

import streamlit as st

st.set_page_config(page_title="schedx", page_icon="🧭", layout="wide")

pages = st.navigation([
    st.Page("pages/passes.py", title="Graph & passes", icon="🔀", default=True, url_path="passes"),
    st.Page("pages/schedule.py", title="Schedule", icon="🛠️", url_path="schedule"),
    st.Page("pages/search.py", title="Search", icon="🔎", url_path="search"),
    st.Page("pages/leaderboard.py", title="Leaderboard", icon="🏁", url_path="leaderboard"),
    st.Page("pages/export.py", title="Export", icon="📦", url_path="export"),
])
pages.run()
