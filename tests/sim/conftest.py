import sys
from pathlib import Path

# The simulation's modules import each other by plain name, as tests/daemon's do.
sys.path.insert(0, str(Path(__file__).resolve().parent))
