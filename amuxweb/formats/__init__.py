"""The console's date and time formats (A9: times to the second), the same in en, zh-hans and ja.

Django's locale formats show a turn's queued, started and finished times as "8:35 a.m." in English: three
different moments that read the same. FORMAT_MODULE_PATH points here, and each language shows ISO-like times
with seconds (an operator compares them, and a log line's time looks the same)."""
