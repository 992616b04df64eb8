"""The dashboard's answer in plain Python: the oracle for serving_dashboard / serving_olap with
top, from_day, to_day and grain.

The window filters days, ISO weeks start on the Monday (`date - weekday()`), quarters by month,
then the periods are ranked by revenue DESC, period ASC and cut at `top`. Rows are
`(order_id, company, order_day, revenue)` tuples.
"""

from __future__ import annotations

import datetime
from collections import defaultdict


def period_start(day: datetime.date, grain: str) -> datetime.date:
    if grain == "day":
        return day
    if grain == "week":
        return day - datetime.timedelta(days=day.weekday())  # ISO: Monday
    if grain == "month":
        return day.replace(day=1)
    if grain == "quarter":
        return datetime.date(day.year, 3 * ((day.month - 1) // 3) + 1, 1)
    if grain == "year":
        return datetime.date(day.year, 1, 1)
    raise AssertionError(grain)


# rows -> {company: [(day, revenue), ...]}, so that the oracle does not rescan every row per call
_BY_COMPANY: dict[int, tuple[list, dict]] = {}


def by_company(rows) -> dict:
    cached = _BY_COMPANY.get(id(rows))
    if cached is None or cached[0] is not rows:
        index = defaultdict(list)
        for _oid, c, day, revenue in rows:
            index[c].append((day, revenue))
        cached = _BY_COMPANY[id(rows)] = (rows, index)
    return cached[1]


def expected(rows, company, top=None, from_day=None, to_day=None, grain="day"):
    sums = defaultdict(int)
    for day, revenue in by_company(rows).get(company, []):
        if (from_day is not None and day < from_day) or (to_day is not None and day > to_day):
            continue
        sums[period_start(day, grain.lower())] += revenue
    ranked = sorted(sums.items(), key=lambda pr: (-pr[1], pr[0]))
    return ranked if top is None else ranked[:top]
