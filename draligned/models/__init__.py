"""One narrow async model interface; providers are registered by protocol and imported lazily."""

from draligned.models.base import ModelAPI, ModelDeclaration, ModelError, get_model

__all__ = ["ModelAPI", "ModelDeclaration", "ModelError", "get_model"]
