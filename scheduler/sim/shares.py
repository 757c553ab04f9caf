"""The ``--shares FILE`` of the simulator: configured fair shares per tenant.

A CSV file with the header ``tenant,share`` and one row per tenant; ``share``
is any positive number (only ratios matter). A bad file is refused with
``SharesError`` naming the file and line: nothing is half-read.
"""

from __future__ import annotations

import csv
import math
import os


class SharesError(ValueError):
    """A shares file the loader refuses; ``str()`` is ``FILE:LINE: message``."""

    def __init__(self, source: str, line: int, message: str) -> None:
        self.source, self.line = source, line
        super().__init__(f"{source}:{line}: {message}")


def load_shares(path: str | os.PathLike[str]) -> dict[str, float]:
    """``{tenant: share}`` from the file at ``path``."""
    name = os.fspath(path)
    try:
        f = open(name, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise SharesError(name, 0, f"cannot open: {e.strerror}") from None
    try:
        with f:
            return _parse(csv.reader(f), name)
    except UnicodeDecodeError as e:
        raise SharesError(name, 0, f"not UTF-8 text ({e.reason})") from None


def _parse(reader, name: str) -> dict[str, float]:
    header = next(reader, None)
    if header is None:
        raise SharesError(name, 1, "empty file: the header tenant,share is required")
    if [c.strip() for c in header] != ["tenant", "share"]:
        raise SharesError(name, 1, f"header must be tenant,share, got {','.join(header)!r}")
    shares: dict[str, float] = {}
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != 2:
            raise SharesError(name, line, f"expected 2 columns (tenant,share), got {len(row)}")
        tenant, text = row[0].strip(), row[1].strip()
        if tenant in shares:
            raise SharesError(name, line, f"column 'tenant': duplicate tenant {tenant!r}")
        try:
            share = float(text)
        except ValueError:
            raise SharesError(name, line, f"column 'share': bad number {text!r}") from None
        if not (math.isfinite(share) and share > 0):
            raise SharesError(name, line, f"column 'share': must be a finite number > 0, got {text!r}")
        shares[tenant] = share
    if not shares:
        raise SharesError(name, 2, "no tenant rows")
    return shares
