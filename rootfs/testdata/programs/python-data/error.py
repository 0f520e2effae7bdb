import numpy as np

raise RuntimeError("boom: " + str(np.zeros(2)))
