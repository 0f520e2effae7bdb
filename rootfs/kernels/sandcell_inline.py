"""matplotlib backend of sandcell's python kernel (MPLBACKEND=module://sandcell_inline).

Figures render with Agg, headless. plt.show() hands every open figure to the
kernel driver at once (in the order shown); figures left open are handed
over when the cell ends.
"""

import _sandcell
from matplotlib.backend_bases import FigureManagerBase as FigureManager  # noqa: F401
from matplotlib.backends.backend_agg import FigureCanvasAgg as FigureCanvas  # noqa: F401


def show(*args, **kwargs):
    _sandcell.show()
