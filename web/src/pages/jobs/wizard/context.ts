/** What every wizard step reads: the state, how to change it, and the problems to show per field. */
import { createContext, useContext, type ReactNode } from 'react';
import type { WizardState, RoleDraft } from './model';

export interface FieldFeedback {
  validateStatus?: 'error';
  help?: ReactNode;
}

export interface WizardApi {
  state: WizardState;
  set: (patch: Partial<WizardState>) => void;
  setRole: (id: string, patch: Partial<RoleDraft>) => void;
  /** Messages (local and server) for a spec field path and everything under it. */
  feedback: (field: string) => FieldFeedback;
  /** The field the user jumped to from the preview, to scroll to and outline. */
  focusField: string | null;
}

export const WizardContext = createContext<WizardApi | null>(null);

export function useWizard(): WizardApi {
  const api = useContext(WizardContext);
  if (!api) throw new Error('useWizard outside the wizard');
  return api;
}
