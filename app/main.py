"""Entry of the schedx UI: declares the pages, nothing else (``schedx ui`` runs this file)."""

import streamlit as st

st.set_page_config(page_title="schedx", page_icon=":material/explore:", layout="wide")

pages = st.navigation([
    st.Page("ui/passes.py", title="Graph & passes", icon=":material/account_tree:", default=True, url_path="passes"),
    st.Page("ui/schedule.py", title="Schedule", icon=":material/build:", url_path="schedule"),
    st.Page("ui/search_page.py", title="Search", icon=":material/travel_explore:", url_path="search"),
    st.Page("ui/leaderboard.py", title="Leaderboard", icon=":material/leaderboard:", url_path="leaderboard"),
    st.Page("ui/profile_page.py", title="Profile", icon=":material/speed:", url_path="profile"),
    st.Page("ui/export_page.py", title="Export", icon=":material/inventory_2:", url_path="export"),
])
pages.run()
