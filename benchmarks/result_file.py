"""The one-GPU benchmarks' JSON file: ``benchmarks/results/<stem>-<date>-<device>.json`` holding the
device, the date, the versions, how the figures were timed and the rows."""

import datetime
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_rows(torch, stem, rows, timing, path=None, **extra):
    """Write ``rows`` (and ``extra`` top-level fields) to ``path`` or the dated default; returns the path."""
    dev = torch.cuda.get_device_name()
    day = datetime.date.today().isoformat()
    path = path or os.path.join(ROOT, "benchmarks", "results", f"{stem}-{day}-{dev.split()[-1].lower()}.json")
    with open(path, "w") as f:
        json.dump({"device": dev, "date": day, "versions": {"torch": torch.__version__, "cuda": torch.version.cuda},
                   **extra, "timing": timing, "rows": rows}, f, indent=1)
    return path
