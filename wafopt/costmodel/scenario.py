"""What the cost model prices: a scenario (wafer, LLM, training, what `parallel:` fixes) and a
choice (layout, tensor-parallel scheme per stage, micro-batch size, layer split).

A plan decides its choice and its placement; `Scenario.workload(choice)` turns the choice into
the per-stage numbers (wafopt.costmodel.model), the one place they are assembled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from wafopt.core.errors import InstanceError
from wafopt.costmodel.layout import stage_schemes
from wafopt.costmodel.model import LayoutWorkload, build_workload, stage_workload
from wafopt.costmodel.rules import legal_schemes, sequence_parallel_violation
from wafopt.costmodel.stage import StageWorkload


@dataclass(frozen=True)
class Parallel:
    tp: int
    pp: int
    dp: int = 1
    interleave: int = 1   # virtual pipeline stages per device (interleaved 1F1B)

    @property
    def dies(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class Fixed:
    """What a partial `parallel:` fixes (None: the planner chooses)."""
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    interleave: int | None = None
    tp_scheme: str | None = None   # megatron | tatp on every stage

    def violation(self, par: Parallel, schemes: tuple[str, ...] = ()) -> str | None:
        """How a plan's layout and schemes break what the instance fixes (interleave: the
        evaluator's own check, wafopt.costmodel.plan_layout)."""
        wrong = [f"{k}={getattr(par, k)} (the instance fixes {k}={getattr(self, k)})"
                 for k in ("tp", "pp", "dp") if getattr(self, k) not in (None, getattr(par, k))]
        if self.tp_scheme is not None and any(s != self.tp_scheme for s in schemes):
            wrong.append(f"tp_scheme {'/'.join(dict.fromkeys(schemes))} (the instance fixes tp_scheme={self.tp_scheme})")
        return "plan layout " + ", ".join(wrong) if wrong else None


@dataclass(frozen=True)
class Choice:
    """What a plan chooses beyond placement. None stands for the scenario's default: its fixed
    layout, Megatron TP on every stage (TATP where tp cannot split the heads), its (least) micro-batch size, its split (else even)."""
    parallel: Parallel | None = None
    schemes: tuple[str, ...] | str | None = None   # scheme per stage, or one for all stages
    micro_batch: int | None = None
    layers: tuple[int, ...] | None = None       # layers per stage
    sequence_parallel: bool | None = None       # None: the scenario's setting

    def __post_init__(self):
        for name in ("schemes", "layers"):   # lists from plans: hashable, so workloads can be cached
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))


@dataclass(frozen=True)
class Scenario:
    wafer: object      # wafopt.hardware.catalog.Wafer
    llm: object        # wafopt.hardware.catalog.LLM
    training: object   # wafopt.costmodel.training.Training
    parallel: Parallel | None   # the fixed layout, or None when the planner searches it
    fixed: Fixed = Fixed()      # what `parallel:` fixes (all of tp, pp, dp when `parallel` is set)
    split: tuple[int, ...] | None = None   # layers per stage of plans without `layers` (None: even)

    def mesh(self):
        return self.wafer.mesh()

    def parallel_of(self, choice: Choice = Choice(), needed_by: str = "this") -> Parallel:
        """The choice's layout, else the scenario's fixed one (InstanceError naming what `needed_by`
        lacks when there is neither)."""
        parallel = choice.parallel or self.parallel
        if parallel is None:
            missing = [k for k in ("tp", "pp") if getattr(self.fixed, k) is None]
            ask = ("add parallel: {tp, pp, dp}" if len(missing) == 2 else
                   f"`parallel:` must give {missing[0]} as well (dp and interleave default to 1)")
            raise InstanceError(f"{needed_by} needs a fixed layout: {ask}", "parallel")
        return parallel

    def training_for(self, choice: Choice = Choice()):
        """The training setup with the choice's micro-batch size and sequence parallelism."""
        return _training(self.training, choice.micro_batch or self.training.micro_batch, choice.sequence_parallel)

    def workload(self, choice: Choice = Choice()) -> LayoutWorkload:
        """The per-stage costs of a choice (defaults: see Choice)."""
        parallel = self.parallel_of(choice)
        split = choice.layers if choice.layers is not None else self.split
        if split is not None and len(split) != parallel.pp and choice.layers is None:
            split = None   # the scenario's split is for its own pp
        return _workload(self, parallel, self.schemes_of(choice), split,
                         choice.micro_batch or self.training.micro_batch, choice.sequence_parallel)

    def schemes_of(self, choice: Choice = Choice()) -> tuple[str, ...]:
        """The choice's scheme per stage; by default the scenario's `tp_scheme`, else Megatron TP
        (TATP where tp cannot split the heads)."""
        parallel = self.parallel_of(choice)
        if choice.schemes is None:
            legal = self.tp_schemes(parallel.tp)
            return stage_schemes(legal[0] if legal else None, parallel.pp)
        return stage_schemes(choice.schemes, parallel.pp)

    def tp_schemes(self, tp: int) -> tuple[str, ...]:
        """The tensor-parallel schemes a plan may use over tp dies: legal ones (wafopt.costmodel.rules),
        the scenario's `tp_scheme` alone where it fixes one; none where forced sequence parallelism
        cannot split the sequence over tp."""
        training = self.training
        if training.sequence_parallel_fixed and training.sequence_parallel and \
                sequence_parallel_violation(training.seq, tp):
            return ()
        legal = legal_schemes(self.llm, tp, self.wafer.parallel_rules, self.wafer)
        if self.fixed.tp_scheme is None or tp == 1:
            return legal
        return tuple(s for s in legal if s == self.fixed.tp_scheme)

    def stage_workload(self, choice: Choice, index: int, first_layer: int, n: int,
                       microbatches: int | None = None) -> StageWorkload:
        """Stage `index` of the choice's pipeline holding layers first_layer .. first_layer + n - 1
        alone (what `workload` builds for it within any split); `microbatches` per iteration sets
        its in-flight count (default: at least pp)."""
        parallel = self.parallel_of(choice)
        scheme = self.schemes_of(choice)[index]
        return stage_workload(self.llm, self.training_for(choice), self.wafer, parallel.tp, parallel.pp,
                              parallel.dp, index, first_layer, n, scheme, microbatches)

    def with_choice(self, choice: Choice) -> "Scenario":
        """The scenario whose plans use the choice's micro-batch size and layer split by default
        (what the kernels derive from when the planner has chosen them)."""
        training = self.training
        if choice.micro_batch is not None:
            training = replace(training, micro_batch=choice.micro_batch, micro_batches=(choice.micro_batch,))
        if choice.sequence_parallel is not None:
            training = replace(training, sequence_parallel=choice.sequence_parallel, sequence_parallel_fixed=True)
        return replace(self, training=training, split=None if choice.layers is None else tuple(choice.layers))

    def plan_fields(self) -> dict:
        """What a plan must say beyond its layout to use this scenario's defaults: `micro_batch`
        where the scenario allows several sizes (the least), `layers` where it has a split."""
        out = {}
        if len(self.training.micro_batches) > 1:
            out["micro_batch"] = self.training.micro_batch
        if self.split is not None:
            out["layers"] = list(self.split)
        return out


@lru_cache(maxsize=128)   # layouts x schemes x splits x micro-batch sizes a search revisits
def _workload(scenario: Scenario, parallel: Parallel, schemes: tuple[str, ...] | None, split, micro_batch: int,
              sequence_parallel: bool | None = None):
    return build_workload(scenario.llm, _training(scenario.training, micro_batch, sequence_parallel),
                          scenario.wafer, parallel.tp, parallel.pp,
                          parallel.dp, schemes, None if split is None else list(split), parallel.interleave)


def _training(training, micro_batch: int, sequence_parallel: bool | None = None):
    if micro_batch != training.micro_batch:
        training = replace(training, micro_batch=micro_batch)
    if sequence_parallel is not None and sequence_parallel != training.sequence_parallel:
        training = replace(training, sequence_parallel=sequence_parallel)
    return training
