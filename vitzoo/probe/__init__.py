"""Using a frozen backbone as people do: embeddings cached once, then evaluated.

    from vitzoo.probe import extract_to_file, load_features, recall_at_k, run_probes, train_test
    extract_to_file(model, splits, "feats.safetensors")               # `vitzoo features`
    train, test = train_test(load_features("feats.safetensors"))      # its train and val splits
    report = run_probes(train, test, methods=("knn", "linear"))       # `vitzoo probe`
    recall_at_k(image_emb, text_emb, image_to_texts, ks=(1, 5, 10))   # {1: 0.52, 5: 0.78, 10: 0.86}

Modules: extract (embeddings of a dataset, resumable), featurefile (the cached file: `Features`,
`save_features`, `load_features`), evaluate (`train_test`, `run_probes`: every method in one call),
knn, linear, fewshot (one method each), retrieval (recall@k over paired embeddings, cosine similarity).
"""

from __future__ import annotations

from .evaluate import METHODS, run_probes, train_test
from .extract import OUTPUTS, embed, extract_features, extract_to_file
from .featurefile import Features, FeaturesFileError, load_features, save_features
from .fewshot import fewshot_accuracy
from .knn import knn_accuracy, knn_predict
from .linear import LinearProbe, fit_linear, linear_accuracy
from .retrieval import image_text_recall, ranks, recall_at_k

__all__ = [
    "METHODS",
    "OUTPUTS",
    "Features",
    "FeaturesFileError",
    "LinearProbe",
    "embed",
    "extract_features",
    "extract_to_file",
    "fewshot_accuracy",
    "fit_linear",
    "image_text_recall",
    "knn_accuracy",
    "knn_predict",
    "linear_accuracy",
    "load_features",
    "ranks",
    "recall_at_k",
    "run_probes",
    "save_features",
    "train_test",
]
