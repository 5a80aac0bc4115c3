"""What-if simulation of maintenance policies: a table's write pattern replayed through the real planner.

``maintd simulate`` answers "what would this policy do to my table?" without touching the table. It learns the
write pattern from the log (:mod:`~maintd.simulate.pattern`) and how big merge outputs are
(:mod:`~maintd.simulate.sizes`, :mod:`~maintd.simulate.keys`). It replays the pattern forward in simulated time,
planning with :func:`maintd.planner.plan` itself (:mod:`~maintd.simulate.engine`), and predicts per policy and
per day files per level, read and write amplification, maintenance work, reclaimable bytes and history kept
(:mod:`~maintd.simulate.report`, :mod:`~maintd.simulate.plot`). :mod:`~maintd.simulate.backtest` simulates a
table's past and compares it with what really happened.

Layering: above the planner and reclamation, beside execution, below the service and the CLI. It imports no
Spark, SQLAlchemy or APScheduler: the daemon's recorded runs come in as plain
:class:`~maintd.simulate.schedule.RecordedRun` values.
"""

from maintd.simulate.backtest import BacktestReport, LevelComparison, backtest, files_error
from maintd.simulate.engine import LEVELS, Run, Sample, simulate
from maintd.simulate.pattern import WritePattern, learn_pattern
from maintd.simulate.plot import plot_format, require_matplotlib, write_plot
from maintd.simulate.report import DayPrediction, PolicyPrediction, SimulationReport
from maintd.simulate.schedule import RecordedRun, Schedule, schedule_from_runs
from maintd.simulate.simulator import MAX_DAYS, CandidatePolicy, Learned, check_days, learn, simulate_table
from maintd.simulate.sizes import SizeModel, learn_sizes

__all__ = [
    "LEVELS",
    "MAX_DAYS",
    "BacktestReport",
    "CandidatePolicy",
    "DayPrediction",
    "Learned",
    "LevelComparison",
    "PolicyPrediction",
    "RecordedRun",
    "Run",
    "Sample",
    "Schedule",
    "SimulationReport",
    "SizeModel",
    "WritePattern",
    "backtest",
    "check_days",
    "files_error",
    "learn",
    "learn_pattern",
    "learn_sizes",
    "plot_format",
    "require_matplotlib",
    "schedule_from_runs",
    "simulate",
    "simulate_table",
    "write_plot",
]
