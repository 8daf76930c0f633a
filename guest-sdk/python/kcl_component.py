"""The component's exports, for componentize-py (``scripts/build-python.sh``
builds this module): the app's ``RecordProcessor`` (``kcl.export(...)`` in
app.py) and the ``window`` export that calls its ``close_window``."""

from app import RecordProcessor  # noqa: F401
from kcl import _WindowExport as Window  # noqa: F401
