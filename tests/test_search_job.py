"""A search is checked once, at its boundary: :class:`search.job_spec.ValidJob` holds the parsed
target, the tasks to search (those schedx writes whole left out) and where to measure, and
:func:`search.tune.tune` takes it as it is."""

from __future__ import annotations

import pytest

from explorer.errors import ExplorerError
from explorer.target import Target, host_target
from explorer.workload import Task, kernel_task, load_workload
from search.errors import SearchError
from search.job_spec import JobSpec, ValidJob


def test_a_spec_is_parsed_once_into_typed_values():
    job = JobSpec("matmul:M=16,N=16,K=16").validate()
    assert isinstance(job.target, Target) and job.target.searchable and job.rpc is None
    assert isinstance(job.tasks, tuple) and all(isinstance(t, Task) for t in job.tasks) and len(job.tasks) == 1
    assert job.source == job.workload.source == "builtin:matmul" and job.shapes == job.workload.input_shapes
    assert job.spec.workload == "matmul:M=16,N=16,K=16"


@pytest.mark.parametrize("make", [lambda: JobSpec("matmul:M=16,N=16,K=16", target="cuda").validate(),
                                  lambda: ValidJob.of_tasks(load_workload("matmul:M=16,N=16,K=16").tasks(), "cuda")])
def test_a_gpu_target_is_refused_at_the_boundary_with_one_message(make):
    with pytest.raises(SearchError, match="schedx searches CPU targets .*`schedx export --target cuda`"):
        make()


def test_kernels_schedx_writes_whole_are_left_out(monkeypatch):
    tasks = load_workload("small_cnn").tasks()[:3]
    whole = tasks[0].name
    monkeypatch.setattr(Task, "hand_written", property(lambda t: t.name == whole))
    job = ValidJob.of_tasks(tasks, host_target(), source="small_cnn")
    assert [t.name for t in job.tasks] == [t.name for t in tasks[1:]] and job.spec is None
    monkeypatch.setattr(Task, "hand_written", property(lambda t: True))
    with pytest.raises(ExplorerError, match="nothing to search"):
        JobSpec("matmul:M=16,N=16,K=16").validate()
    assert ValidJob.of_tasks([kernel_task(load_workload("matmul:M=16,N=16,K=16").kernel)]).tasks == ()
