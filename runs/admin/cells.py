"""Cells of the admin's lists that keep a row within 1280 px (docs/admin.md, "Screen
width"): a long name, handler or owner is cut with an ellipsis by the stylesheet
(runs/static/runs/admin.css, ``.cell-cut``) and shown whole on hover (its title) and on
the object's own page. One task name of 200 characters pushed Handler and Owner off a
1366 px screen, and Schedule off a 1280 px one."""

from django.utils.html import format_html
from django.utils.safestring import SafeString


def cut(text, narrow: bool = False, two_lines: bool = False) -> SafeString:
    """``text`` (str) in a span the stylesheet cuts at 18rem (``narrow``: 10rem;
    ``two_lines``: 10rem wide, wrapped onto at most two lines, for the run lists whose
    rows must fit 1366 px with the sidebar open), its whole value in the title."""
    css = ("cell-cut cell-cut-two-lines" if two_lines
           else "cell-cut cell-cut-narrow" if narrow else "cell-cut")
    return format_html('<span class="{}" title="{}">{}</span>', css, text, text)
