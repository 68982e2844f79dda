#!/usr/bin/env bash
# The faithfulness of ten explanation methods over the photos that come with the installed
# packages (no download): Grace Hopper and the present (matplotlib), the Chinese temple and the
# flower (scikit-learn, installed with grad-cam from bench/requirements.txt), scored on the
# bundled, trained EfficientNet-Lite0 with TorchCAM's protocol (each image's top-1 class, its
# softmax, the map as the mask) and the deletion, insertion and ROAD metrics beside it:
#   bash bench/evaluate_folder.sh                 (the run in runs/evaluate-photos)
#   METHODS=gradcam,saliency bash bench/evaluate_folder.sh   (other methods)
# Resumable as any run: stopped, the same command continues. About 15 minutes on 2 CPU cores,
# Score-CAM most of it (a forward pass per channel of the layer).
set -eu
photos="${PHOTOS:-runs/evaluate-photos-images}"
out="${OUT:-runs/evaluate-photos}"
methods="${METHODS:-gradcam,gradcam++,scorecam,layercam,eigencam,randomcam,saliency,edges,random,centre}"
mkdir -p "$photos"
python - "$photos" <<'EOF'
"""Copy the photos bundled with the installed packages into the folder given."""
import importlib.util
import shutil
import sys
from pathlib import Path

wanted = {
    "matplotlib": ["mpl-data/sample_data/grace_hopper.jpg",
                   "mpl-data/sample_data/Minduka_Present_Blue_Pack.png"],
    "sklearn": ["datasets/images/china.jpg", "datasets/images/flower.jpg"],
}
for package, files in wanted.items():
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for name in files:
        found = [Path(folder, name) for folder in folders if Path(folder, name).is_file()]
        if found:
            shutil.copy(found[0], Path(sys.argv[1], Path(name).name))
        else:
            print(f"not installed: {package}'s {name}", file=sys.stderr)
EOF
python -m hookviz evaluate "$photos" --model efficientnet_lite0 --methods "$methods" \
    --out "$out" "$@"
