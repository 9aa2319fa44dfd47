"""The web demo's sample data: a day's settlements, the same on every run for the same day.

The settlement API serves them; the page's summary reads the app's own ledger (no upstream), so
it stays up while the settlement API is down.
"""

from __future__ import annotations

import datetime
import random
from typing import Any

MERCHANTS = (
    "Acme Outdoor",
    "Blue Harbor Books",
    "Cobalt Coffee",
    "Delta Bikes",
    "Evergreen Grocers",
    "Fjord Design",
    "Granite Tools",
    "Harbor Pharmacy",
)
CURRENCY = "EUR"
SETTLEMENTS_PER_DAY = 12


def settlements(day: datetime.date) -> list[dict[str, Any]]:
    """The settlements of `day`: id, merchant, amount and fee (cents), status, settledAt."""
    rng = random.Random(day.toordinal())
    rows = []
    for n in range(SETTLEMENTS_PER_DAY):
        amount = rng.randrange(8_000, 2_500_000)
        settled = datetime.datetime.combine(day, datetime.time(6 + n, rng.randrange(60)))
        status = "paid" if n < SETTLEMENTS_PER_DAY - 3 else rng.choice(("paid", "pending"))
        rows.append(
            {
                "id": f"stl_{day:%Y%m%d}_{n + 1:03d}",
                "merchant": rng.choice(MERCHANTS),
                "amount": amount,
                "fee": round(amount * 0.014) + 25,
                "currency": CURRENCY,
                "status": status,
                "settledAt": settled.isoformat(timespec="minutes"),
            }
        )
    return rows


def summary(day: datetime.date) -> dict[str, Any]:
    """The day's totals from the app's own ledger: gross, fees, net, counts, merchants."""
    rows = settlements(day)
    gross = sum(r["amount"] for r in rows)
    fees = sum(r["fee"] for r in rows)
    return {
        "day": day.isoformat(),
        "currency": CURRENCY,
        "gross": gross,
        "fees": fees,
        "net": gross - fees,
        "count": len(rows),
        "pending": sum(1 for r in rows if r["status"] == "pending"),
        "merchants": len({r["merchant"] for r in rows}),
    }
