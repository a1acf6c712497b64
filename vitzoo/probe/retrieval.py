"""Retrieval recall@k on paired embeddings (image -> text, text -> image, or any query -> key).

    recall_at_k(query_emb, key_emb)                               # query i matches key i
    recall_at_k(image_emb, text_emb, image_to_texts, ks=(1, 5, 10))   # several correct keys per query
    image_text_recall(image_emb, text_emb, text_to_image)         # both directions, CLIP style
    recall_by_label(test_emb, test_labels, train_emb, train_labels)   # image retrieval by class

Similarity is cosine (both sides L2-normalised). A query is a hit at k when one of its correct keys
is among its k most similar keys. Ties are broken against the query: a wrong key with the same
similarity as the best correct key counts as ranked above it, so a constant embedding scores no
better than chance and the result does not depend on the order of the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

DEFAULT_KS = (1, 5, 10)
CHUNK = 1024  # queries compared at once, so that the similarity matrix never needs all queries


def _matrix(name: str, emb: torch.Tensor) -> torch.Tensor:
    if not isinstance(emb, torch.Tensor) or emb.ndim != 2 or emb.shape[0] == 0:
        shape = tuple(emb.shape) if isinstance(emb, torch.Tensor) else type(emb).__name__
        raise ValueError(f"{name}: expected a non-empty (count, dim) tensor, got {shape}")
    if not emb.is_floating_point():
        raise ValueError(f"{name}: expected floating point embeddings, got {emb.dtype}")
    if not torch.isfinite(emb).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return torch.nn.functional.normalize(emb.detach().float(), dim=1)


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    out = tuple(ks)
    if not out or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in out):
        raise ValueError(f"ks: expected positive integers, got {ks!r}")
    return out


def _correct_mask(query_to_keys: Sequence[int | Sequence[int]] | None, queries: int, keys: int) -> torch.Tensor:
    """(queries, keys) booleans: True where the key is a correct answer to the query."""
    if query_to_keys is None:
        if queries != keys:
            raise ValueError(
                f"query_to_keys: required when the counts differ ({queries} queries, {keys} keys); "
                "without it query i matches key i"
            )
        return torch.eye(queries, dtype=torch.bool)
    if len(query_to_keys) != queries:
        raise ValueError(f"query_to_keys: {len(query_to_keys)} entries for {queries} queries")
    mask = torch.zeros(queries, keys, dtype=torch.bool)
    for q, correct in enumerate(query_to_keys):
        idx = [correct] if isinstance(correct, int) else list(correct)
        if not idx:
            raise ValueError(f"query_to_keys[{q}]: no correct key")
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < keys for i in idx):
            raise ValueError(f"query_to_keys[{q}]: key indices must be integers in [0, {keys}), got {correct!r}")
        mask[q, idx] = True
    return mask


def ranks(
    query_emb: torch.Tensor, key_emb: torch.Tensor, query_to_keys: Sequence[int | Sequence[int]] | None = None
) -> torch.Tensor:
    """For each query, the 0-based rank of its best correct key (ties counted against the query)."""
    q, k = _pair(query_emb, key_emb)
    mask = _correct_mask(query_to_keys, q.shape[0], k.shape[0])
    return _ranks(q, k, lambda start, end: mask[start:end])


def _pair(query_emb: torch.Tensor, key_emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = _matrix("query_emb", query_emb)
    k = _matrix("key_emb", key_emb)
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"key_emb: dimension {k.shape[1]} differs from query_emb's {q.shape[1]}")
    return q, k


def _ranks(q: torch.Tensor, k: torch.Tensor, correct_rows: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """Ranks of normalised queries `q` among keys `k`; `correct_rows(start, end)` gives the
    (end - start, keys) mask of correct keys of those queries."""
    out = torch.empty(q.shape[0], dtype=torch.long)
    for start in range(0, q.shape[0], CHUNK):
        end = min(start + CHUNK, q.shape[0])
        sim = q[start:end] @ k.T
        correct = correct_rows(start, end)
        if not bool(correct.any(dim=1).all()):
            row = start + int((~correct.any(dim=1)).nonzero()[0])
            raise ValueError(f"query {row} has no correct key among the keys")
        best = sim.masked_fill(~correct, float("-inf")).amax(dim=1, keepdim=True)
        out[start:end] = ((sim >= best) & ~correct).sum(dim=1).cpu()
    return out


def recall_by_label(
    query_emb: torch.Tensor,
    query_labels: torch.Tensor,
    key_emb: torch.Tensor,
    key_labels: torch.Tensor,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[int, float]:
    """Image retrieval by class: a query is a hit at k when one of its k nearest keys (cosine) has
    its label. Every query's label must occur among the keys."""
    ks = _check_ks(ks)
    q, k = _pair(query_emb, key_emb)
    if query_labels.shape != (q.shape[0],) or key_labels.shape != (k.shape[0],):
        raise ValueError(
            f"labels: expected ({q.shape[0]},) query and ({k.shape[0]},) key labels, "
            f"got {tuple(query_labels.shape)} and {tuple(key_labels.shape)}"
        )
    missing = sorted(set(query_labels.tolist()) - set(key_labels.tolist()))
    if missing:
        raise ValueError(f"query_labels: label(s) {missing[:5]} occur among no key; nothing could be retrieved")
    qy, ky = query_labels.to(q.device), key_labels.to(k.device)
    r = _ranks(q, k, lambda start, end: qy[start:end, None] == ky[None, :])
    return {kk: int((r < kk).sum()) / len(r) for kk in ks}


def recall_at_k(
    query_emb: torch.Tensor,
    key_emb: torch.Tensor,
    query_to_keys: Sequence[int | Sequence[int]] | None = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[int, float]:
    """{k: fraction of queries with a correct key among their k nearest keys (cosine)}.

    `query_to_keys[i]` lists the indices of the keys that answer query i (one or several); without it
    query i matches key i and both sides must have the same count.
    """
    ks = _check_ks(ks)
    r = ranks(query_emb, key_emb, query_to_keys)
    return {k: int((r < k).sum()) / len(r) for k in ks}


def image_text_recall(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    text_to_image: Sequence[int] | None = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[str, dict[int, float]]:
    """Recall@k both ways for image-caption pairs: {"image_to_text": {k: r}, "text_to_image": {k: r}}.

    `text_to_image[j]` is the image that caption j describes (an image may have several captions, as in
    COCO and Flickr30k); without it caption j describes image j.
    """
    images = _matrix("image_emb", image_emb).shape[0]
    texts = _matrix("text_emb", text_emb).shape[0]
    pairs = list(range(texts)) if text_to_image is None else list(text_to_image)
    if len(pairs) != texts:
        raise ValueError(f"text_to_image: {len(pairs)} entries for {texts} captions")
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < images for i in pairs):
        raise ValueError(f"text_to_image: image indices must be integers in [0, {images})")
    image_to_texts: list[list[int]] = [[] for _ in range(images)]
    for j, i in enumerate(pairs):
        image_to_texts[i].append(j)
    missing = [i for i, texts in enumerate(image_to_texts) if not texts]
    if missing:
        raise ValueError(f"text_to_image: image {missing[0]} has no caption ({len(missing)} images without one)")
    return {
        "image_to_text": recall_at_k(image_emb, text_emb, image_to_texts, ks),
        "text_to_image": recall_at_k(text_emb, image_emb, [[i] for i in pairs], ks),
    }
