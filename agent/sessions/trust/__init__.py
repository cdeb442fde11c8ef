"""Whose a session is: the signature of every checkpoint (signing.py) and the local ledger of what
this machine signed (ledger.py); docs/SECURITY.md, "A store peer"."""
