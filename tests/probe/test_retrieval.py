"""recall@k checked against a plain argsort ranking, on hand-made cases with known answers."""

from __future__ import annotations

import pytest
import torch

from vitzoo.probe import image_text_recall, ranks, recall_at_k, retrieval


def reference_recall(query, key, query_to_keys, ks):
    """Sort each query's keys by cosine similarity (a stable sort that puts correct keys last among
    equals: ties count against the query) and look for the first correct one."""
    q = torch.nn.functional.normalize(query.double(), dim=1)
    k = torch.nn.functional.normalize(key.double(), dim=1)
    sim = q @ k.T
    hits = {kk: 0 for kk in ks}
    for i, correct in enumerate(query_to_keys):
        order = sorted(range(k.shape[0]), key=lambda j: (-sim[i, j].item(), j in correct))
        rank = min(order.index(j) for j in correct)
        for kk in ks:
            hits[kk] += rank < kk
    return {kk: hits[kk] / q.shape[0] for kk in ks}


def test_identity_pairs_match_the_argsort_reference_and_chunking_changes_nothing(monkeypatch):
    g = torch.Generator().manual_seed(0)
    query = torch.randn(40, 8, generator=g)
    key = query + 0.9 * torch.randn(40, 8, generator=g)  # noisy pairs: recall between 0 and 1
    ks = (1, 5, 10)
    got = recall_at_k(query, key, ks=ks)
    want = reference_recall(query, key, [[i] for i in range(40)], ks)
    assert got == pytest.approx(want, abs=1e-12)
    assert 0 < got[1] < got[10] < 1
    monkeypatch.setattr(retrieval, "CHUNK", 7)  # queries compared 7 at a time
    assert recall_at_k(query, key, ks=ks) == got


def test_several_correct_keys_per_query():
    g = torch.Generator().manual_seed(1)
    query = torch.randn(12, 6, generator=g)
    key = torch.randn(30, 6, generator=g)
    query_to_keys = [[i, i + 12] if i < 6 else [i + 12] for i in range(12)]
    ks = (1, 3, 30)
    got = recall_at_k(query, key, query_to_keys, ks)
    assert got == pytest.approx(reference_recall(query, key, query_to_keys, ks), abs=1e-12)
    assert got[30] == 1.0


def test_a_hand_made_case():
    # keys on the unit circle; query 0 is nearest key 0, query 1's correct key (2) is its second nearest
    key = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    query = torch.tensor([[2.0, 0.1], [0.1, 1.0]])  # scale does not matter: cosine
    assert ranks(query, key, [[0], [2]]).tolist() == [0, 1]
    assert recall_at_k(query, key, [[0], [2]], ks=(1, 2)) == {1: 0.5, 2: 1.0}
    assert recall_at_k(query, key, [[0], [1, 2]], ks=(1,)) == {1: 1.0}  # either key answers query 1


def test_ties_count_against_the_query():
    constant = torch.ones(5, 4)
    assert ranks(constant, constant).tolist() == [4, 4, 4, 4, 4]
    assert recall_at_k(constant, constant, ks=(1, 5)) == {1: 0.0, 5: 1.0}


def test_image_text_recall_both_directions_with_several_captions_per_image():
    images = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # captions 0 and 1 describe image 0, caption 2 image 1; caption 1 is closer to image 1
    texts = torch.tensor([[1.0, 0.1], [0.2, 1.0], [0.1, 1.0]])
    got = image_text_recall(images, texts, [0, 0, 1], ks=(1, 2))
    assert got["image_to_text"] == {1: 1.0, 2: 1.0}  # image 0 finds caption 0; image 1 caption 2
    assert got["text_to_image"] == pytest.approx({1: 2 / 3, 2: 1.0})  # caption 1 misses at 1
    assert image_text_recall(images, images)["text_to_image"][1] == 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.ones(3), torch.ones(3, 2)), "query_emb: expected a non-empty"),
        ((torch.ones(3, 2), torch.ones(3, 4)), "key_emb: dimension 4"),
        ((torch.ones(3, 2), torch.ones(4, 2)), "query_to_keys: required when the counts differ"),
        ((torch.ones(2, 2), torch.ones(4, 2), [[0]]), "query_to_keys: 1 entries for 2 queries"),
        ((torch.ones(2, 2), torch.ones(4, 2), [[0], []]), r"query_to_keys\[1\]: no correct key"),
        ((torch.ones(2, 2), torch.ones(4, 2), [[0], [4]]), r"query_to_keys\[1\]: key indices"),
        ((torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2)), "query_emb: expected floating point"),
        ((torch.full((2, 2), float("nan")), torch.ones(2, 2)), "query_emb: contains NaN"),
        ((torch.ones(2, 2), torch.ones(2, 2), None, (0,)), "ks: expected positive integers"),
    ],
)
def test_bad_arguments_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        recall_at_k(*args)


def test_image_text_recall_names_bad_pairings():
    with pytest.raises(ValueError, match="text_to_image: 2 entries for 3 captions"):
        image_text_recall(torch.ones(2, 2), torch.ones(3, 2), [0, 1])
    with pytest.raises(ValueError, match=r"image indices must be integers in \[0, 2\)"):
        image_text_recall(torch.ones(2, 2), torch.ones(2, 2), [0, 2])
    with pytest.raises(ValueError, match="image 1 has no caption"):
        image_text_recall(torch.ones(2, 2), torch.ones(2, 2), [0, 0])
