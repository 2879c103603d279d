"""``{% cpu_isolation_of benchmark.hardware_class_id as cpus %}``: whether a class's scored
runs have CPUs of their own, for the benchmark page
(``portal.hosts.selectors.class_cpu_isolation``)."""

from __future__ import annotations

from django import template

from portal.hosts.selectors import ClassCpuIsolation, class_cpu_isolation

register = template.Library()


@register.simple_tag
def cpu_isolation_of(hardware_class: str) -> ClassCpuIsolation | None:
    return class_cpu_isolation(hardware_class)
