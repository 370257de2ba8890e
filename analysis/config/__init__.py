"""The configuration: one TOML file, validated whole, every mistake reported with file, line, key.

The file is found by ``--config``, ``$SLOWDOWN_CONFIG``, ``~/.config/slowdown/slowdown.toml``
(``$XDG_CONFIG_HOME``) and ``/etc/slowdown/slowdown.toml``, in that order; with none of
them, :func:`default_config` gives a small local setup. Validation collects every error
instead of stopping at the first, so ``slowdown-probe check-config`` can list them all.
"""

from __future__ import annotations

from slowdown.analysis.config.checks import validate
from slowdown.analysis.config.defaults import (
    SYSTEM_CONFIG_PATH,
    data_dir,
    default_config,
    default_config_paths,
    default_database,
)
from slowdown.analysis.config.errors import ConfigError, ConfigErrors, format_key
from slowdown.analysis.config.files import find_config_path, load, load_config, loads
from slowdown.analysis.config.model import (
    ACTION_TYPES,
    ALERT_KINDS,
    ActionConfig,
    AlertRule,
    BaselineConfig,
    Config,
    DataSize,
    FleetConfig,
    MetricsConfig,
    MotdConfig,
    PublishConfig,
    Target,
)
from slowdown.analysis.words import OPS, STATISTICS, is_statistic, statistic_quantile

__all__ = [
    "ACTION_TYPES",
    "ALERT_KINDS",
    "OPS",
    "STATISTICS",
    "SYSTEM_CONFIG_PATH",
    "ActionConfig",
    "AlertRule",
    "BaselineConfig",
    "Config",
    "ConfigError",
    "ConfigErrors",
    "DataSize",
    "FleetConfig",
    "MetricsConfig",
    "MotdConfig",
    "PublishConfig",
    "Target",
    "data_dir",
    "default_config",
    "default_config_paths",
    "default_database",
    "find_config_path",
    "format_key",
    "is_statistic",
    "load",
    "load_config",
    "loads",
    "statistic_quantile",
    "validate",
]
