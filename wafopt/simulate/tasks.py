"""The task description a simulation reads.

Defined in `wafopt.costmodel.tasks` (below the problems layer, so the plan problem's producer
`plan_tasks(scenario, plan)` can build it from the cost model); re-exported here for the
simulator's users. Field units and the 1F1B task-graph semantics are documented there.
"""

from wafopt.costmodel.tasks import (
                                   Block,
                                   Comm,
                                   Compute,
                                   Die,
                                   Flow,
                                   Link,
                                   Offload,
                                   PlanTasks,
                                   StageTasks,
                                   Step,
                                   analytic_seconds,
                                   compute_seconds,
)

__all__ = ["Block", "Comm", "Compute", "Die", "Flow", "Link", "Offload", "PlanTasks", "StageTasks", "Step",
           "analytic_seconds", "compute_seconds"]
