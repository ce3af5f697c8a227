"""Test-model generators (tiny random-weight GGUFs with MTP layers, realistic-shape files).

Development tools, not part of the installed package: the wheel ships only ``pymtp/``.
Importable from a checkout's root (``python -m pymtp_devtools.realistic ...``) and by the
tests (tests/conftest.py puts the checkout's root on ``sys.path``).
"""
