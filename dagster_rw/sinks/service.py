"""The sinks as the runtime sees them (runtime.warehouse.SinkService): creating and dropping a
sink, delivering its input's changes, and what status shows of it. The connection hands this to
its warehouse, so the runtime never imports a connector."""
from __future__ import annotations

from . import definition, delivery


class Sinks:
    create = staticmethod(definition.create_sink)
    drop = staticmethod(definition.drop_sink)
    deliver = staticmethod(delivery.deliver)
    deliver_best_effort = staticmethod(delivery.deliver_best_effort)
    forget_target = staticmethod(delivery.forget_target)
    delivered_epoch = staticmethod(delivery.delivered_epoch)
    status_fields = staticmethod(delivery.status_fields)


SINKS = Sinks()
