"""The kit's model: timm's EVA-02, FP32, batched on the GPU, fed by a torch DataLoader.

Needs torch, timm, Pillow and NumPy (the kit's Dockerfile installs them). ``abi.py`` does
the ABI; this module only builds an :class:`abi.Model`:

- ``load``: PIL decodes one JPEG to RGB and applies the model's own eval transform up to
  the tensor conversion (timm's resize and center crop), giving uint8 pixels (H, W, 3).
- ``loader``: a DataLoader with worker processes (forked before the weights are loaded)
  and ``abi.collate``, which stacks the pixels with NumPy. NumPy batches reach the main
  process through a pipe, not ``/dev/shm``: the scoring sandbox's shared memory is the
  benchmark's ``run_shm_bytes`` (64 MiB unless staff raise it), too small for batches of
  float tensors.
- ``infer``: uint8 to float, /255, minus mean, over std (exactly what timm's ToTensor and
  Normalize do, done on the GPU), then the network, then argmax.

Weights: the file frozen into the image at build time (``EVA02_CHECKPOINT``, by default
``/opt/eva02/model.pt``, a whole pickled timm module), or with ``EVA02_RANDOM_WEIGHTS=1``
random ones (``timm.create_model(name, pretrained=False)``: no file, no network), which
exercise the same path at the same speed but answer nonsense.
"""

from __future__ import annotations

import os
from typing import Any

import abi
import numpy as np
import timm.data
import torch
from PIL import Image
from torch.utils.data import DataLoader

TENSOR_STEPS = ("ToTensor", "MaybeToTensor", "PILToTensor", "Normalize")
PREFETCH_BATCHES = 4


class PreTensor:
    """The eval transform's steps before the tensor conversion (PIL in, PIL out)."""

    def __init__(self, steps: list[Any]) -> None:
        self.steps = steps

    def __call__(self, image: Image.Image) -> Image.Image:
        for step in self.steps:
            image = step(image)
        return image


def split_transform(data_config: dict[str, Any]) -> PreTensor:
    """timm's eval transform for ``data_config``, without its ToTensor and Normalize."""
    transform = timm.data.create_transform(**data_config, is_training=False)
    steps = list(getattr(transform, "transforms", [transform]))
    names = [type(step).__name__ for step in steps]
    cut = next((i for i, name in enumerate(names) if name in TENSOR_STEPS), len(steps))
    if not all(name in TENSOR_STEPS for name in names[cut:]):
        raise abi.SetupError(f"unexpected steps in the model's eval transform: {names}")
    return PreTensor(steps[:cut])


def load_image(path: str, pre_tensor: PreTensor) -> np.ndarray:
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    return np.asarray(pre_tensor(rgb), dtype=np.uint8)


def stack(images: list[np.ndarray]) -> np.ndarray:
    return np.stack(images)


def normalize(pixels: np.ndarray, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (N, H, W, 3) to the network's float input (N, 3, H, W), on ``mean``'s device:
    the same operations, in the same order, as torchvision's ToTensor and Normalize."""
    batch = torch.from_numpy(pixels).to(mean.device, non_blocking=True)
    batch = batch.permute(0, 3, 1, 2).contiguous().float().div_(255)
    return batch.sub_(mean).div_(std)


def build_network(settings: abi.Settings) -> torch.nn.Module:
    """The network on the CPU, in eval mode."""
    if settings.random_weights:
        torch.manual_seed(0)
        try:
            network = timm.create_model(settings.model_name, pretrained=False)
        except RuntimeError as error:  # an unknown model name
            raise abi.SetupError(str(error)) from error
    else:
        if not os.path.isfile(settings.checkpoint):
            raise abi.SetupError(
                f"no checkpoint at {settings.checkpoint} (build the environment from the kit's "
                "Dockerfile, or set EVA02_RANDOM_WEIGHTS=1 to try the path with random weights)"
            )
        network = torch.load(settings.checkpoint, map_location="cpu", weights_only=False, mmap=True)
    return network.eval()


def pick_device(settings: abi.Settings) -> torch.device:
    if settings.device:
        return torch.device(settings.device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def make_model(settings: abi.Settings) -> abi.Model:
    """The EVA-02 model as ``abi.main`` wants it (see the module doc)."""
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 throughout, as the reference
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    device = pick_device(settings)
    network = build_network(settings)
    data_config = timm.data.resolve_model_data_config(network)
    pre_tensor = split_transform(data_config)
    mean = torch.tensor(data_config["mean"], dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(data_config["std"], dtype=torch.float32).view(1, 3, 1, 1)
    workers = settings.workers

    def loader(images: abi.Images, batch_size: int, collate_fn: abi.Collate) -> DataLoader:
        return DataLoader(
            images,  # map-style: len() and [index]
            batch_size=batch_size,
            shuffle=False,
            num_workers=workers,
            collate_fn=collate_fn,
            prefetch_factor=PREFETCH_BATCHES if workers else None,
            multiprocessing_context="fork" if workers else None,
        )

    state: dict[str, Any] = {}

    def prepare() -> None:
        # After the loader's workers are forked: CUDA is never initialised in a parent
        # of a fork, and the first images decode while the weights move to the GPU.
        state["network"] = network.to(device)
        state["mean"], state["std"] = mean.to(device), std.to(device)

    @torch.inference_mode()
    def infer(pixels: np.ndarray) -> list[int]:
        batch = normalize(pixels, state["mean"], state["std"])
        logits = state["network"](batch)
        classes: list[int] = logits.argmax(dim=1).tolist()
        return classes

    weights = "random weights" if settings.random_weights else settings.checkpoint
    return abi.Model(
        load=_Loader(pre_tensor),
        stack=stack,
        infer=infer,
        loader=loader,
        prepare=prepare,
        batch_size=settings.batch_size,
        description=(
            f"{settings.model_name} ({weights}) on {device}, batches of {settings.batch_size}, "
            f"{workers} loader processes"
        ),
    )


class _Loader:
    """``load_image`` bound to the transform (a class, so worker processes can hold it)."""

    def __init__(self, pre_tensor: PreTensor) -> None:
        self.pre_tensor = pre_tensor

    def __call__(self, path: str) -> np.ndarray:
        return load_image(path, self.pre_tensor)
