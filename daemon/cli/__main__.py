import sys

from reckon.daemon.cli.main import main

sys.exit(main())
