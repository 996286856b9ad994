"""(this family is being written)"""
__all__ = []
