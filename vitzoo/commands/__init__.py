"""The subcommands of `vitzoo`, one module each, every one the same shape:

    configure_parser(parser)   adds the subcommand's arguments (and its description) to `parser`
    run(args) -> int           does the work; returns the exit code, raises on failure

COMMANDS is the one table of them: name -> (module, one-line help). vitzoo/cli.py builds the
`vitzoo` parser from it and imports only the module of the subcommand being run, so `vitzoo list`
never pays for matplotlib or the training code, and `vitzoo --help` for none of them.
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("vitzoo.commands.list", "list registered models"),
    "info": ("vitzoo.commands.info", "config, parameters, GFLOPs, sources, preprocessing, origin"),
    "download": ("vitzoo.commands.download", "fetch pretrained weights into the cache"),
    "convert": ("vitzoo.commands.convert", "convert a checkpoint between layouts"),
    "predict": ("vitzoo.commands.predict", "classify images: top-k labels and probabilities"),
    "zeroshot": ("vitzoo.commands.zeroshot", "classify images by label names with an image-text model (CLIP, SigLIP)"),
    "export": ("vitzoo.commands.export", "write an ONNX file or a torch.export program for deployment"),
    "finetune": ("vitzoo.commands.finetune", "fine-tune a model (vitzoo.train)"),
    "eval": ("vitzoo.commands.eval", "evaluate a model: accuracy and confusion matrix"),
    "shards": ("vitzoo.commands.shards", "write an image folder as WebDataset shards (--data wds:OUT)"),
    "features": ("vitzoo.commands.features", "embed every image of a dataset once: a safetensors file for probe"),
    "probe": ("vitzoo.commands.probe", "kNN, linear, few-shot and retrieval evaluation of cached features"),
    "segment": ("vitzoo.commands.segment", "a linear segmentation probe of a frozen backbone: mIoU, pixel accuracy"),
    "viz": ("vitzoo.commands.viz", "draw patches, embeddings and attention as PNGs"),
    "bench": ("vitzoo.commands.bench", "time releases here, eager and optimized: a CSV and an accuracy-speed PNG"),
    "push": ("vitzoo.commands.push", "upload a run's best model or saved weights to the Hugging Face Hub"),
}

__all__ = ["COMMANDS"]
