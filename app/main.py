"""Entry of the schedx UI: declares the pages, nothing else (``schedx ui`` runs this file)."""

import streamlit as st

from app.layout import APP_CSS

st.set_page_config(page_title="schedx", page_icon=":material/explore:", layout="wide")
st.html(APP_CSS)  # the app's few style rules (app/layout.py): style only, it takes no room on the page

graph = st.Page("ui/passes.py", title="Graph & passes", icon=":material/account_tree:", url_path="passes")


def _home() -> None:
    """The root URL opens Graph & passes at its own address. (Streamlit serves its default page at
    "/" alone: with Graph & passes the default, "/passes", the address a user types, was "Page not
    found".)"""
    st.switch_page(graph)


pages = st.navigation([
    st.Page(_home, title="schedx", default=True, url_path="home", visibility="hidden"),
    graph,
    st.Page("ui/schedule.py", title="Schedule", icon=":material/build:", url_path="schedule"),
    st.Page("ui/search_page.py", title="Search", icon=":material/travel_explore:", url_path="search"),
    st.Page("ui/leaderboard.py", title="Leaderboard", icon=":material/leaderboard:", url_path="leaderboard"),
    st.Page("ui/profile_page.py", title="Profile", icon=":material/speed:", url_path="profile"),
    st.Page("ui/export_page.py", title="Export", icon=":material/inventory_2:", url_path="export"),
])
pages.run()
