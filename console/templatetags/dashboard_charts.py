"""The dashboard's two SVG charts per bot row, as markup built in one call per chart.

A template loop costs a few variable lookups, escapes and localizations per rect, and the gate chart alone has
hundreds of rects per page: they were most of the page's render time. These tags write the same markup (tests
compare it with the loops it replaced): the coordinates are ints, written plain as SVG needs them; the counts in
the titles are localized as `{{ value }}` would; the outcome names, a handful per page, are escaped once each.
"""

from __future__ import annotations

from datetime import date
from functools import cache

from django import template
from django.utils.formats import localize
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from console.dashboard.health import Segment
from console.dashboard.selectors import DayBar

register = template.Library()


@cache
def _escaped(name: str) -> str:
    return escape(name)


@register.simple_tag
def token_bar_rects(bars: list[DayBar]) -> SafeString:
    return mark_safe(
        "".join(
            f'<rect class="bar" x="{int(bar.x)}" y="{int(bar.y)}" width="8" height="{int(bar.height)}">'
            f"<title>{escape(bar.title)}</title></rect>"
            for bar in bars
        )
    )


@register.simple_tag
def gate_bar_rects(columns: list[tuple[int, date, list[Segment]]]) -> SafeString:
    return mark_safe(
        "".join(
            f'<rect class="o-{_escaped(segment.name)}" x="{int(x)}" y="{int(segment.y)}" width="8"'
            f' height="{int(segment.height)}"><title>{day.isoformat()}: {escape(localize(segment.value))}'
            f" {_escaped(segment.name)}</title></rect>"
            for x, day, segments in columns
            for segment in segments
        )
    )


@register.filter
def get_item(mapping: dict, key: str):
    """`mapping[key]` in a template (a cost window, then a kind): None when absent."""
    return mapping.get(key) if mapping else None
