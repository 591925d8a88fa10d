"""Time zone names as people type them (a workspace's /schedule times, issue 25 K4)."""

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones


def time_zone_is_known(name: str) -> bool:
    """True for an IANA name the system knows (e.g. "Asia/Shanghai"); a path-like or unknown name is not."""
    if not name or name not in available_timezones():
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True
