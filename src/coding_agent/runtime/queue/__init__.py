"""The task queue between producer and workers: memory (in-process) or RabbitMQ."""

from coding_agent.runtime.queue.base import Delivery, MalformedMessage, QueuedTask, Reason, TaskQueue, decode, encode

__all__ = ["Delivery", "MalformedMessage", "QueuedTask", "Reason", "TaskQueue", "decode", "encode"]
