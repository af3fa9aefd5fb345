"""``sacme report``: the paper's characterisation of a cluster (sections 3-5).

``compute`` asks the store for aggregates and assembles a :class:`Report`;
the ``render_*`` modules turn it into text, JSON, CSV or a self-contained HTML
page with matplotlib figures. Nothing here writes SQL.
"""
