"""Graph passes run at import (and before export); one pass per file, each verified after it runs."""
