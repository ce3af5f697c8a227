"""Command-line interface: `pymtp info | generate | chat` (entry point pymtp.cli.main:main)."""


def main(argv=None) -> int:
    from pymtp.cli.main import main as _main

    return _main(argv)
