"""ecommerce: an online shop's orders, shipping and returns.

Importing the package registers the seed and every tool on ``env``.
"""

from environments.library.ecommerce import seed, tools
from environments.library.ecommerce.app import env
from environments.library.ecommerce.models import TODAY, Base

__all__ = ["TODAY", "Base", "env", "seed", "tools"]
