"""The what-if simulator: replay scenarios and job traces through the quota engine on a simulated clock.

Pure Python over ``airflow_quota.engine``: no Airflow import, no database. ``python -m airflow_quota.sim``
is the command line (docs/simulator.md); ``simulate`` runs a parsed ``Scenario`` in-process.
"""

from airflow_quota.sim.result import SimulationError, SimulationResult
from airflow_quota.sim.runner import simulate
from airflow_quota.sim.scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__all__ = [
    "Scenario",
    "ScenarioError",
    "SimulationError",
    "SimulationResult",
    "load_scenario",
    "parse_scenario",
    "simulate",
]
