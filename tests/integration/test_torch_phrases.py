"""Drop-in fidelity of refusals: where cute_shard refuses a strict view that the installed
torch also refuses, its message also holds the sentence torch prints for that view, and
nothing of torch's where torch does not refuse it.

torch's propagator (``torch/distributed/tensor/_ops/_view_ops.py``) refuses a strict view with
one of a few sentences, each followed by its advice ("Please redistribute ..."): "This
operation would remove or reshape sharded dimension D, which requires redistribution",
"Cannot flatten unevenly sharded tensor: ...", "Cannot unflatten unevenly sharded tensor:
...", "Cannot unflatten tensor with _StridedShard placement: ...". Which one a view gets, and
its numbers, is torch's walk on the release installed: cute_shard asks torch's own propagator
when the message is read (``rules.torch_compat.torch_refusal``) instead of guessing, so the
words follow torch from release to release. Each case below is refused by both; torch's
sentence is computed by running torch, not pinned, and ours must contain it, number for
number. Code that matches torch's messages, such as DTensor's own tests'
``assertRaisesRegex(RuntimeError, "Cannot flatten unevenly sharded tensor")``, then keeps
working with ``install()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._ops import _view_ops as torch_view_ops
from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard

import cute_shard
from cute_shard import rules

from .test_install import dtensor

# (torch's phrase that starts the sentence, global shape, view shape, mesh, placements)
# fmt: off
CASES: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[Any, ...]]] = [
    ("Cannot flatten unevenly sharded tensor", (4, 3, 8), (2, 4, 12), (2,), (Shard(1),)),
    ("Cannot flatten unevenly sharded tensor", (5, 3, 4), (4, 3, 5), (4, 2),
     (Shard(1), Replicate())),
    ("Cannot unflatten unevenly sharded tensor", (10, 12), (2, 5, 12), (8,), (Shard(0),)),
    ("Cannot unflatten unevenly sharded tensor", (12,), (3, 4), (2,), (Shard(0),)),
    ("Cannot unflatten unevenly sharded tensor", (6,), (3, 2, 1), (2, 4), (Shard(0), Shard(0))),
    ("Cannot unflatten tensor with _StridedShard placement", (6, 2), (4, 1, 3), (4, 2),
     (_StridedShard(0, split_factor=2), Replicate())),
]
# fmt: on
IDS = [f"{c[0].split()[1]}-{'x'.join(map(str, c[1]))}" for c in CASES]


def torch_sentence(message: str) -> str:
    """The sentence of torch's message that says why (what precedes its advice)."""
    return message.split(". ")[0].rstrip(".")


def torch_refusal(
    shape: tuple[int, ...], new: tuple[int, ...], mesh: tuple[int, ...], placements: Any
) -> str:
    rule = torch_view_ops.view_groups(shape, new)
    with pytest.raises(RuntimeError) as info:
        torch_view_ops.propagate_shape_and_sharding(placements, shape, rule, mesh, True)
    return torch_sentence(str(info.value))


def our_refusal(
    shape: tuple[int, ...], rule: Any, mesh: tuple[int, ...], placements: Any
) -> cute_shard.RedistributionRequired:
    with pytest.raises(cute_shard.RedistributionRequired) as info:
        cute_shard.propagate_shape_and_sharding(placements, shape, rule, mesh, True)
    return info.value


@pytest.mark.parametrize(("phrase", "shape", "new", "mesh", "placements"), CASES, ids=IDS)
def test_the_engine_refuses_in_torchs_words(
    phrase: str,
    shape: tuple[int, ...],
    new: tuple[int, ...],
    mesh: tuple[int, ...],
    placements: Any,
) -> None:
    theirs = torch_refusal(shape, new, mesh, placements)
    assert theirs.startswith(phrase)
    ours = str(our_refusal(shape, rules.view_groups(shape, new), mesh, placements))
    assert theirs in ours
    assert ours.startswith("view needs communication: tensor dim")  # ours still explains


def test_squeeze_in_place_refuses_in_torchs_words() -> None:
    """squeeze_ stays strict (it cannot redistribute in place): dropping a sharded size-1 dim
    is torch's "remove or reshape"."""
    shape, mesh, placements = (4, 1, 6), (2, 2), (Shard(0), Shard(1))
    meta = torch.empty(shape, device="meta")
    rule = torch_view_ops.dim_maps[torch.squeeze](meta, 1)
    with pytest.raises(RuntimeError) as info:
        torch_view_ops.propagate_shape_and_sharding(placements, shape, rule, mesh, True)
    theirs = torch_sentence(str(info.value))
    ours = our_refusal(shape, rules.squeeze(shape, 1), mesh, placements)
    assert theirs == (
        "This operation would remove or reshape sharded dimension 1, which requires redistribution"
    )
    assert theirs in str(ours)


def test_torchs_sentence_is_the_one_torch_prints_when_several_mesh_dims_move() -> None:
    """torch names the first refusal its own walk meets, here mesh dim 1's; ours explains mesh
    dim 0's and quotes torch's sentence as torch prints it."""
    shape, new, mesh, placements = (3, 2), (1, 2, 3), (2, 4), (Shard(1), Shard(0))
    theirs = torch_refusal(shape, new, mesh, placements)
    assert theirs.startswith("Cannot flatten unevenly sharded tensor: dimension 0 (size 3)")
    ours = our_refusal(shape, rules.view_groups(shape, new), mesh, placements)
    assert [b.mesh_dim for b in ours.blocked] == [0, 1]
    assert theirs in str(ours)


def test_no_words_of_torchs_where_torch_does_not_refuse() -> None:
    """torch's propagator keeps [S0, S0] for this view (a wrong answer: each rank's local view
    then fails) where cute_shard refuses: the message is cute_shard's alone."""
    shape, new, mesh, placements = (512,), (4, 128), (2, 4), (Shard(0), Shard(0))
    rule = torch_view_ops.view_groups(shape, new)
    torch_view_ops.propagate_shape_and_sharding(placements, shape, rule, mesh, True)  # answers
    ours = our_refusal(shape, rules.view_groups(shape, new), mesh, placements)
    assert ours.torch_words is None and "torch" not in str(ours)


def test_the_refusal_pays_for_torchs_words_only_when_read(monkeypatch: Any) -> None:
    asked: list[tuple[int, ...]] = []
    real = torch_view_ops.propagate_shape_and_sharding
    monkeypatch.setattr(
        torch_view_ops,
        "propagate_shape_and_sharding",
        lambda *a: asked.append(a[1]) or real(*a),
    )
    shape, new, mesh, placements = (4, 3, 8), (2, 4, 12), (2,), (Shard(1),)
    error = our_refusal(shape, rules.view_groups(shape, new), mesh, placements)
    assert asked == []
    assert error.torch_words is not None and error.torch_words in str(error)
    assert asked == [shape]


# --------------------------------------------------------------------------------------------
# Through DTensor: the message a user's x.view(...) raises


@pytest.fixture
def mesh_of(world8: None) -> Iterator[Any]:
    yield lambda shape: init_device_mesh("cpu", shape)


@pytest.mark.parametrize(("phrase", "shape", "new", "mesh", "placements"), CASES, ids=IDS)
def test_dtensor_view_raises_torchs_words_with_install(
    mesh_of: Any,
    phrase: str,
    shape: tuple[int, ...],
    new: tuple[int, ...],
    mesh: tuple[int, ...],
    placements: Any,
) -> None:
    device_mesh: DeviceMesh = mesh_of(mesh)
    x: DTensor = dtensor(shape, device_mesh, placements)
    cute_shard.uninstall()
    with pytest.raises(RuntimeError) as theirs:
        x.view(new)
    cute_shard.install()
    with pytest.raises(RuntimeError, match=phrase) as ours:
        x.view(new)
    assert torch_sentence(str(theirs.value)) in str(ours.value)


def test_dtensor_squeeze_in_place_raises_torchs_words_with_install(mesh_of: Any) -> None:
    mesh = mesh_of((2, 4))
    cute_shard.uninstall()
    with pytest.raises(RuntimeError) as theirs:
        dtensor((4, 1, 6), mesh, (Shard(0), Shard(1))).squeeze_(1)
    cute_shard.install()
    with pytest.raises(RuntimeError, match="would remove or reshape sharded dimension 1") as ours:
        dtensor((4, 1, 6), mesh, (Shard(0), Shard(1))).squeeze_(1)
    assert torch_sentence(str(theirs.value)) in str(ours.value)
