# The data-science layer's libraries, headless: a frame, a fit, a figure
# rendered to PNG and read back with pillow.
import io
import sys

import matplotlib
import numpy as np
import pandas as pd
import scipy.stats
from PIL import Image

name = sys.stdin.readline().strip()
df = pd.DataFrame({"x": np.arange(10), "y": 2 * np.arange(10) + 1})
fit = scipy.stats.linregress(df.x, df.y)
assert round(fit.slope, 6) == 2.0, fit
import matplotlib.pyplot as plt  # noqa: E402  (after the backend check)

assert matplotlib.get_backend().lower() == "agg", matplotlib.get_backend()
fig = plt.figure(figsize=(2, 1), dpi=50)
plt.plot(df.x, df.y)
buf = io.BytesIO()
fig.savefig(buf, format="png")
assert Image.open(buf).size == (100, 50)
print(f"hello, {name}")
