"""Using a frozen backbone as people do: evaluation on embeddings.

    from vitzoo.probe import recall_at_k, image_text_recall
    recall_at_k(image_emb, text_emb, image_to_texts, ks=(1, 5, 10))   # {1: 0.52, 5: 0.78, 10: 0.86}

Modules: retrieval (recall@k over paired embeddings, cosine similarity).
"""

from __future__ import annotations

from .retrieval import image_text_recall, ranks, recall_at_k

__all__ = ["image_text_recall", "ranks", "recall_at_k"]
