# What type checkers see of `import reckon` (PEP 561): the names __init__.py loads on first use.
# A stub, not imports in __init__.py: the client modules import reckon.daemon, which is under this
# package, so naming them from __init__.py (even under TYPE_CHECKING) would be an import circle.
from reckon.client import Client as Client
from reckon.errors import NotLeader as NotLeader
from reckon.errors import ReckonError as ReckonError
from reckon.errors import Refused as Refused
from reckon.errors import Unreachable as Unreachable
from reckon.errors import UsageError as UsageError
from reckon.job import Job as Job

__version__: str
__all__: list[str]
