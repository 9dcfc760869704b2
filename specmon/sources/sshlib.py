"""asyncssh, imported in this one place without the warnings its import prints beside a current `cryptography`.

asyncssh 2.24 names the DSA key types when it is imported, and cryptography 51 warns "DSA is deprecated" for each
of them: a dozen lines on stderr before any specmon command that may use SSH (`status`, `stop`, `metrics`) has said
a word. specmon never offers or accepts a DSA key of its own; the warning is for asyncssh, not for our users. Only
that message is silenced, and only during this import.
"""

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="DSA is deprecated")
    import asyncssh

__all__ = ["asyncssh"]
