"""plot_check.py TMP: compare_losses.py's plot keeps coinciding validation points visible. Two logs with the same
validation loss at the same step are plotted; the pixels around that point must hold both logs' colors (before, the
second log's dot covered the first's). Prints one PASS or FAIL line."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors
import matplotlib.figure
import matplotlib.image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import compare_losses  # noqa: E402

tmp = sys.argv[1]
logs = []
for name in ("a", "b"):
    path = os.path.join(tmp, f"same_{name}.jsonl")
    with open(path, "w") as f:
        for step in range(1, 21):
            f.write(json.dumps({"step": step, "loss": 1.0, "lr": 1e-3, "grad_norm": 1.0}) + "\n")
        f.write(json.dumps({"step": 10, "val_loss": 3.0}) + "\n")
    logs.append(compare_losses.read_log(path)[1])
figures = []  # the figure plot() draws, to find the point's pixels
save = matplotlib.figure.Figure.savefig


def keep_and_save(fig, *args, **kwargs):
    figures.append(fig)
    return save(fig, *args, **kwargs)


matplotlib.figure.Figure.savefig = keep_and_save
png = os.path.join(tmp, "same.png")
compare_losses.plot(png, ["a", "b"], logs)
fig = figures[0]
img = matplotlib.image.imread(png)
scale = img.shape[0] / (fig.get_figheight() * fig.dpi)  # the PNG's dpi over the figure's
x, y = fig.axes[0].transData.transform((10, 3.0)) * scale  # pixels from the bottom left
row, col = img.shape[0] - int(round(y)), int(round(x))
patch = img[row - 8:row + 9, col - 8:col + 9, :3].reshape(-1, 3)


def present(color):
    rgb = matplotlib.colors.to_rgb(color)
    return any(sum((p[i] - rgb[i]) ** 2 for i in range(3)) < 0.01 for p in patch)


seen = {c: present(c) for c in ("C0", "C1")}
print(("PASS" if all(seen.values()) else "FAIL") + " compare_losses.py: the validation points of two logs at the same "
      "place both stay visible (" + ", ".join(f"{c} {'seen' if v else 'hidden'}" for c, v in seen.items()) + ")")
